pub mod transport;
pub use transport::*;
