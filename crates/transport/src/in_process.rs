//! The in-process transport: an MCP server running in this process, reached over an in-memory
//! duplex pipe. Nothing is spawned; the server task ends when the pipe closes.

use std::sync::Arc;

use tokio::io::DuplexStream;

use crate::connector::{BoxFuture, ConnectOptions, Connector, Session, initialize_with};
use crate::error::TransportError;
use crate::express::ExpressSetup;
use crate::handler::HarnessClient;

/// Starts serving one client on the server end of a duplex pipe (typically by spawning an rmcp
/// server task on it). Called once per connect.
pub type InProcessServe = Arc<dyn Fn(DuplexStream) + Send + Sync>;

/// Buffer size of each direction of the pipe.
const PIPE_BYTES: usize = 256 * 1024;

/// Connects to a server running in the same process.
#[derive(Clone)]
pub struct InProcessConnector {
    /// Serves the in-process server on its end of the pipe.
    pub serve: InProcessServe,
}

impl std::fmt::Debug for InProcessConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InProcessConnector")
    }
}

impl Connector for InProcessConnector {
    fn kind(&self) -> &'static str {
        "in-process"
    }

    fn connect(
        &self,
        handler: HarnessClient,
        options: ConnectOptions,
    ) -> BoxFuture<'static, Result<Session, TransportError>> {
        let serve = self.serve.clone();
        Box::pin(async move {
            let (client_end, server_end) = tokio::io::duplex(PIPE_BYTES);
            serve(server_end);
            let (read, write) = tokio::io::split(client_end);
            let transport = crate::lines::LineTransport::new(read, write, options.inbound(true));
            let express = ExpressSetup::written(transport.sender("in-process (express)"));
            initialize_with(handler, transport, &options, None, None, express).await
        })
    }
}
