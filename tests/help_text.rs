//! What `--help` and the tables' footnotes tell a user: every flag under the heading of the group it belongs to,
//! the transports named as the binary knows them, and the confidence-interval footnote with the rep count the
//! run really had.

mod common;
use common::*;
use std::collections::BTreeMap;

/// `kvxfer CMD --help` as heading → the long flags under it, in order (`Options` for the untitled group).
fn headings(cmd: &str) -> BTreeMap<String, Vec<String>> {
    let out = run(&[cmd, "--help"]);
    out.expect_code(0);
    let mut map: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut heading = None;
    for line in out.stdout.lines() {
        if !line.starts_with(' ') && line.ends_with(':') {
            heading = Some(line.trim_end_matches(':').to_string());
            continue;
        }
        let flag = line.trim_start();
        // A flag's first line: `-d, --device <NAME>  …` or `--sizes <LIST>  …`, indented two or six spaces.
        if line.len() - flag.len() > 6 || !flag.starts_with('-') {
            continue;
        }
        if let (Some(h), Some(long)) = (&heading, flag.split_whitespace().find(|w| w.starts_with("--"))) {
            map.entry(h.clone()).or_default().push(long.trim_end_matches(',').to_string());
        }
    }
    map
}

fn under<'a>(map: &'a BTreeMap<String, Vec<String>>, heading: &str) -> Vec<&'a str> {
    map.get(heading).map(|v| v.iter().map(String::as_str).collect()).unwrap_or_default()
}

#[test]
fn sweep_help_puts_each_flag_under_its_own_heading() {
    let h = headings("sweep");
    assert_eq!(under(&h, "RDMA device"), ["--device", "--ib-port", "--gid-index", "--peer-device"], "{h:#?}");
    assert_eq!(under(&h, "Sizes"), ["--sizes", "--tokens", "--model", "--model-config", "--kv-bytes-per-token"]);
    let run = under(&h, "Run");
    for f in ["--reps", "--warmup", "--transport", "--verify", "--prepare", "--connect-timeout", "--io-timeout"] {
        assert!(run.contains(&f), "{f} is not under Run: {h:#?}");
    }
    assert_eq!(under(&h, "Output"), ["--json", "--csv", "--md", "--events", "--fig", "--line", "--html", "--out-dir"]);
    assert_eq!(
        under(&h, "KV layout"),
        ["--layout", "--block-tokens", "--pool-tokens", "--coalesce", "--dst-placement"]
    );
    assert!(under(&h, "RDMA verbs (--transport verbs)").starts_with(&["--qps"]), "{h:#?}");
    assert!(
        under(&h, "Options").starts_with(&[
            "--set",
            "--resume",
            "--plan",
            "--here",
            "--estimate-from",
            "--src",
            "--dst"
        ]),
        "{h:#?}"
    );
}

#[test]
fn serve_send_cluster_and_predict_help_keep_their_own_flags_out_of_other_headings() {
    let device = ["--device", "--ib-port", "--gid-index"];
    let serve = headings("serve");
    assert_eq!(under(&serve, "RDMA device"), device, "{serve:#?}");
    for f in ["--listen", "--max-size", "--max-sessions", "--io-timeout"] {
        assert!(under(&serve, "Options").contains(&f), "{f}: {serve:#?}");
    }
    let cluster = headings("cluster");
    assert_eq!(under(&cluster, "RDMA device"), device, "{cluster:#?}");
    assert!(under(&cluster, "Options").contains(&"--step-timeout"), "{cluster:#?}");
    let send = headings("send");
    assert_eq!(under(&send, "RDMA device"), device, "{send:#?}");
    assert!(under(&send, "Run").contains(&"--reps") && under(&send, "Output").contains(&"--json"), "{send:#?}");
    let predict = headings("predict");
    assert!(under(&predict, "Options").contains(&"--decode-ms"), "{predict:#?}");
    assert!(!under(&predict, "Sizes").contains(&"--decode-ms"), "{predict:#?}");
}

/// The `--transport` entry of `sweep --help`: its prose, and the names clap lists as possible values.
fn transport_help() -> (String, Vec<String>) {
    let out = run(&["sweep", "--help"]);
    let text = out.expect_code(0).stdout.clone();
    let start = text.find("--transport <").expect("--transport in sweep --help");
    let rest = &text[start..];
    // The entry runs to the next flag line.
    let end = rest.find("\n      --").unwrap_or(rest.len());
    let entry = rest[..end].split_whitespace().collect::<Vec<_>>().join(" ");
    let values = entry.split("[possible values: ").nth(1).expect("possible values").split(']').next().unwrap();
    let names = values.split(", ").filter(|v| *v != "auto").map(str::to_string).collect();
    let prose = entry.split(" [default:").next().unwrap().to_string();
    (prose, names)
}

#[test]
fn transport_help_names_every_transport() {
    let (prose, names) = transport_help();
    assert!(names.iter().any(|n| n == "mooncake") && names.iter().any(|n| n == "nixl"), "{names:?}");
    let missing: Vec<&String> = names.iter().filter(|n| !prose.contains(n.as_str())).collect();
    assert!(missing.is_empty(), "the prose leaves out {missing:?}: {prose}");
}

#[test]
fn the_ci_footnote_names_the_rep_count_the_run_had() {
    let t = TempDir::new("ci-footnote");
    let (json, md, dir) = (t.arg("r.json"), t.arg("r.md"), t.arg(""));
    let args = ["sweep", "--transport", "tcp", "--sizes", "1MiB", "--reps", "3", "--warmup", "0"];
    let out = run(&[&args[..], &["--json", &json, "--md", &md, "--out-dir", &dir]].concat());
    out.expect_code(0);
    // Three reps: [min, max] covers the median with 1 - 2/8 = 75%.
    let note = "covers the median with less than 95% (75.0% at n = 3)";
    assert!(out.stdout.contains(note), "{}", out.stdout);
    let md = std::fs::read_to_string(t.join("r.md")).unwrap();
    assert!(md.contains(note) && !md.contains("n = 5"), "{md}");
}
