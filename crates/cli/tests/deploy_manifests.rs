//! The deployment files under `deploy/` are checked offline: the Kubernetes manifests parse and
//! hold what running several replicas depends on (probes on `/readyz` and `/healthz`, resources,
//! a non-root and read-only container, a termination grace that covers the drain deadline, the
//! session key from a Secret, a config from a ConfigMap, a Service without stickiness, a
//! PodDisruptionBudget and a CPU HorizontalPodAutoscaler that all select the Deployment's pods),
//! and the Dockerfile is multi-stage, distroless, stripped and non-root.

use std::path::PathBuf;

use serde::Deserialize as _;
use serde_json::Value;

fn deploy() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

/// Every document of every manifest under `deploy/kubernetes/`.
fn documents() -> Vec<Value> {
    let mut docs = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(deploy().join("kubernetes"))
        .expect("deploy/kubernetes")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no manifest in deploy/kubernetes");
    for file in files {
        let text = std::fs::read_to_string(&file).expect("read manifest");
        for document in serde_yaml_ng::Deserializer::from_str(&text) {
            let value = Value::deserialize(document)
                .unwrap_or_else(|e| panic!("{} does not parse: {e}", file.display()));
            if !value.is_null() {
                docs.push(value);
            }
        }
    }
    docs
}

fn one<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let found: Vec<&Value> = docs.iter().filter(|d| d["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "expected one {kind}");
    found[0]
}

fn arg_after<'a>(args: &'a [Value], flag: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1))
        .and_then(Value::as_str)
}

#[test]
fn kubernetes_manifests_hold_what_replicas_need() {
    let docs = documents();
    for doc in &docs {
        assert!(doc["apiVersion"].is_string(), "no apiVersion: {doc}");
        assert!(doc["metadata"]["name"].is_string(), "no name: {doc}");
    }
    let deployment = one(&docs, "Deployment");
    let pod = &deployment["spec"]["template"];
    let labels = &pod["metadata"]["labels"];
    assert_eq!(
        &deployment["spec"]["selector"]["matchLabels"], labels,
        "the Deployment selects its own pods"
    );
    assert!(deployment["spec"]["replicas"].as_u64().unwrap_or(0) >= 2);
    let spec = &pod["spec"];
    let containers = spec["containers"].as_array().expect("containers");
    assert_eq!(containers.len(), 1);
    let container = &containers[0];
    let args = container["args"].as_array().expect("args");
    assert!(args.iter().any(|a| a == "serve"), "{args:?}");
    let listen = arg_after(args, "--http").expect("serve --http");
    let port: u64 = listen
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("--http HOST:PORT");
    let ports = container["ports"].as_array().expect("ports");
    let named = ports
        .iter()
        .find(|p| p["containerPort"] == port)
        .expect("the --http port is a container port");
    let port_name = named["name"].as_str().expect("the port is named");

    // Probes on the gateway's own endpoints, on the served port.
    for (probe, path) in [("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")] {
        let get = &container[probe]["httpGet"];
        assert_eq!(get["path"], path, "{probe}: {}", container[probe]);
        assert!(
            get["port"] == port_name || get["port"] == port,
            "{probe} port: {}",
            get["port"]
        );
    }
    // Resources.
    for side in ["requests", "limits"] {
        for resource in ["cpu", "memory"] {
            assert!(
                !container["resources"][side][resource].is_null(),
                "resources.{side}.{resource} missing"
            );
        }
    }
    // Non-root, no privilege escalation, read-only root filesystem, no capabilities.
    let non_root = container["securityContext"]["runAsNonRoot"] == true
        || spec["securityContext"]["runAsNonRoot"] == true;
    assert!(non_root, "runAsNonRoot");
    let user = container["securityContext"]["runAsUser"]
        .as_u64()
        .or(spec["securityContext"]["runAsUser"].as_u64());
    assert!(user.is_some_and(|u| u != 0), "runAsUser non-zero");
    let security = &container["securityContext"];
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert!(
        security["capabilities"]["drop"]
            .as_array()
            .is_some_and(|d| d.iter().any(|c| c == "ALL")),
        "capabilities drop ALL"
    );
    // The termination grace covers the preStop pause and the drain deadline.
    let drain: u64 = arg_after(args, "--drain-secs")
        .and_then(|s| s.parse().ok())
        .expect("--drain-secs set explicitly");
    let pause = container["lifecycle"]["preStop"]["sleep"]["seconds"]
        .as_u64()
        .unwrap_or(0);
    let grace = spec["terminationGracePeriodSeconds"]
        .as_u64()
        .expect("terminationGracePeriodSeconds");
    assert!(
        grace >= drain + pause,
        "terminationGracePeriodSeconds {grace} < preStop {pause} + drain {drain}"
    );

    // The session key comes from a Secret that exists and holds that key.
    let env = container["env"].as_array().expect("env");
    let keys = env
        .iter()
        .find(|e| e["name"] == "MCP_HARNESS_SESSION_KEYS")
        .expect("MCP_HARNESS_SESSION_KEYS in env");
    assert!(keys["value"].is_null(), "the session key is not inline");
    let secret_ref = &keys["valueFrom"]["secretKeyRef"];
    let secret = one(&docs, "Secret");
    assert_eq!(secret["metadata"]["name"], secret_ref["name"]);
    let key = secret_ref["key"].as_str().expect("key");
    assert!(
        !secret["stringData"][key].is_null() || !secret["data"][key].is_null(),
        "the Secret holds {key}"
    );

    // The config comes from a ConfigMap, mounted where --config points.
    let config_path = arg_after(args, "--config").expect("--config");
    let config_map = one(&docs, "ConfigMap");
    let volume = spec["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["configMap"]["name"] == config_map["metadata"]["name"])
        .expect("a volume from the ConfigMap");
    let mount = container["volumeMounts"]
        .as_array()
        .expect("volumeMounts")
        .iter()
        .find(|m| m["name"] == volume["name"])
        .expect("the ConfigMap volume is mounted");
    let mount_path = mount["mountPath"].as_str().expect("mountPath");
    let file = config_path
        .strip_prefix(mount_path)
        .map(|f| f.trim_start_matches('/'))
        .expect("--config lies in the ConfigMap mount");
    let config: Value = serde_json::from_str(
        config_map["data"][file]
            .as_str()
            .expect("the ConfigMap holds the config file"),
    )
    .expect("the config is JSON");
    assert!(config["mcpServers"].is_object(), "{config}");

    // Service, PDB and HPA select the same pods; no stickiness; CPU autoscaling.
    let service = one(&docs, "Service");
    for (key, value) in service["spec"]["selector"].as_object().expect("selector") {
        assert_eq!(&labels[key], value, "Service selector {key}");
    }
    assert_ne!(service["spec"]["sessionAffinity"], "ClientIP");
    let target = &service["spec"]["ports"][0]["targetPort"];
    assert!(target == port_name || target == port, "targetPort {target}");
    let pdb = one(&docs, "PodDisruptionBudget");
    assert_eq!(&pdb["spec"]["selector"]["matchLabels"], labels);
    assert!(
        !pdb["spec"]["maxUnavailable"].is_null() || !pdb["spec"]["minAvailable"].is_null(),
        "the PDB bounds disruptions"
    );
    let hpa = one(&docs, "HorizontalPodAutoscaler");
    assert_eq!(hpa["spec"]["scaleTargetRef"]["kind"], "Deployment");
    assert_eq!(
        hpa["spec"]["scaleTargetRef"]["name"],
        deployment["metadata"]["name"]
    );
    assert!(hpa["spec"]["minReplicas"].as_u64().unwrap_or(0) >= 2);
    assert!(
        hpa["spec"]["metrics"]
            .as_array()
            .is_some_and(|m| m.iter().any(|m| m["resource"]["name"] == "cpu")),
        "HPA on CPU"
    );
}

#[test]
fn dockerfile_is_multi_stage_distroless_stripped_and_non_root() {
    let text = std::fs::read_to_string(deploy().join("Dockerfile")).expect("deploy/Dockerfile");
    let froms: Vec<&str> = text
        .lines()
        .filter(|l| l.trim_start().to_uppercase().starts_with("FROM "))
        .collect();
    assert!(froms.len() >= 2, "multi-stage: {froms:?}");
    let last = froms.last().expect("a final stage");
    assert!(
        last.contains("distroless") || last.contains("scratch"),
        "final stage distroless or static: {last}"
    );
    assert!(text.contains("strip"), "the binary is stripped");
    let user = text
        .lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix("USER "))
        .expect("USER in the final stage");
    assert!(
        !(user.starts_with("root") || user.starts_with("0:") || user == "0"),
        "non-root USER: {user}"
    );
    assert!(text.contains("--locked"), "built from the lockfile");
}
