//! Which differences between two runs' fingerprints can change the numbers: comparing runs across them compares
//! the environment (or what the transport chose while connecting) as much as the configuration.

use serde_json::Value;

fn at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, k| v.get(k)).filter(|v| !v.is_null())
}

fn text(v: &Value) -> String {
    v.as_str().map(String::from).unwrap_or_else(|| v.to_string())
}

/// The differences that matter between two `env` objects, one sentence each. Keys one of them lacks (files from
/// older kvxfer versions, hosts without NICs) are not compared.
pub fn differences(a: &Value, b: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for (path, what) in [
        (&["iommu", "mode"][..], "IOMMU mode"),
        (&["gpu_driver"][..], "GPU driver"),
        (&["cuda_driver_version"][..], "CUDA driver version"),
    ] {
        if let (Some(x), Some(y)) = (at(a, path), at(b, path)) {
            if x != y {
                out.push(format!("{what} {} vs {}", text(x), text(y)));
            }
        }
    }
    let nics = |v: &Value| v.get("nics").and_then(|n| n.as_array()).cloned().unwrap_or_default();
    for x in nics(a) {
        let Some(y) = nics(b).into_iter().find(|y| y.get("name") == x.get("name")) else { continue };
        let name = x.get("name").map(text).unwrap_or_default();
        if let (Some(f), Some(g)) = (at(&x, &["fw_ver"]), at(&y, &["fw_ver"])) {
            if f != g {
                out.push(format!("NIC {name} firmware {} vs {}", text(f), text(g)));
            }
        }
        let ports = |v: &Value| v.get("ports").and_then(|p| p.as_array()).cloned().unwrap_or_default();
        for p in ports(&x) {
            let Some(q) = ports(&y).into_iter().find(|q| q.get("port") == p.get("port")) else { continue };
            for (key, what) in [("mtu", "MTU"), ("rate", "link rate"), ("link_layer", "link layer")] {
                if let (Some(m), Some(n)) = (at(&p, &[key]), at(&q, &[key])) {
                    if m != n {
                        let port = p.get("port").map(text).unwrap_or_default();
                        out.push(format!("NIC {name} port {port} {what} {} vs {}", text(m), text(n)));
                    }
                }
            }
        }
    }
    out
}

/// Choices a transport made while connecting (`config.transport_detail`), each as the keys whose values, joined
/// by `+`, name it. Measurements (rates, registration times) and identities (sessions, GIDs) are not choices: they
/// differ between any two runs.
const TRANSPORT_CHOICES: &[(&[&[&str]], &str)] = &[
    (&[&["sender", "send"], &["sender", "recv"]], "tcp path (send+receive)"),
    (&[&["sender", "copy"]], "copy"),
    (&[&["sender", "staging"]], "staging"),
    (&[&["sender", "reg_method"]], "memory registration"),
    (&[&["sender", "port", "link_layer"]], "link layer"),
    (&[&["sender", "port", "gid_type"]], "GID type"),
    (&[&["sender", "port", "active_mtu"]], "path MTU"),
    (&[&["sender", "protocol"]], "protocol"),
    (&[&["sender", "version"]], "engine version"),
    (&[&["sender", "backend"]], "backend"),
    (&[&["sender", "op"]], "operation"),
    (&[&["sender", "memory"]], "registered memory"),
];

/// The choices two runs' transports made differently (see [`TRANSPORT_CHOICES`]), one phrase each:
/// `tcp path (send+receive) write+direct vs splice+bounce`. A choice one of them does not record (another
/// transport, a file from an older kvxfer) is not compared.
pub fn transport_differences(a: &Value, b: &Value) -> Vec<String> {
    let choice = |v: &Value, keys: &[&[&str]]| -> Option<String> {
        keys.iter().map(|k| at(v, k).map(text)).collect::<Option<Vec<_>>>().map(|parts| parts.join("+"))
    };
    TRANSPORT_CHOICES
        .iter()
        .filter_map(|(keys, what)| match (choice(a, keys), choice(b, keys)) {
            (Some(x), Some(y)) if x != y => Some(format!("{what} {x} vs {y}")),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn env(fw: &str, mtu: u32, iommu: &str) -> Value {
        json!({"iommu": {"mode": iommu}, "kernel": "6.1",
               "nics": [{"name": "mlx5_0", "fw_ver": fw, "ports": [{"port": 1, "mtu": mtu, "rate": "400 Gb/sec"}]}]})
    }

    #[test]
    fn firmware_mtu_and_iommu_differences_are_named() {
        assert!(differences(&env("28.1", 9000, "passthrough"), &env("28.1", 9000, "passthrough")).is_empty());
        let d = differences(&env("28.1", 9000, "passthrough"), &env("28.2", 1500, "translated"));
        assert_eq!(
            d,
            vec![
                "IOMMU mode passthrough vs translated",
                "NIC mlx5_0 firmware 28.1 vs 28.2",
                "NIC mlx5_0 port 1 MTU 9000 vs 1500"
            ]
        );
    }

    #[test]
    fn missing_keys_are_not_differences() {
        assert!(differences(&json!({"kernel": "6.1"}), &env("28.1", 9000, "off")).is_empty());
    }

    #[test]
    fn transport_choices_that_differ_are_named_and_measurements_are_not() {
        let tcp = |send: &str, recv: &str, gbps: f64| {
            json!({"sender": {"send": send, "recv": recv, "streams": 1, "calibration_gbps": {"write+direct": gbps},
                              "path_reason": format!("measured {gbps}")}})
        };
        assert!(transport_differences(&tcp("write", "direct", 3.0), &tcp("write", "direct", 4.0)).is_empty());
        assert_eq!(
            transport_differences(&tcp("write", "direct", 3.0), &tcp("splice", "bounce", 3.0)),
            vec!["tcp path (send+receive) write+direct vs splice+bounce"]
        );
        // Another transport's detail, or none (an older file): nothing in common to compare.
        let cuda = json!({"sender": {"gpu": 0, "copy": "ce", "staging": "none", "streams": 1}});
        assert!(transport_differences(&tcp("write", "direct", 3.0), &cuda).is_empty());
        assert!(transport_differences(&tcp("write", "direct", 3.0), &Value::Null).is_empty());
        let batch = json!({"sender": {"gpu": 0, "copy": "batch", "staging": "none", "streams": 1}});
        assert_eq!(transport_differences(&cuda, &batch), vec!["copy ce vs batch"]);
    }
}
