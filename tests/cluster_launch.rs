//! What `kvxfer cluster` ranks are told before they meet: the token rule a cluster shares with `serve`.

mod common;

use common::launch::clean;
use common::Proc;
use std::process::Command;

#[test]
fn a_short_token_is_refused_off_loopback_as_serve_refuses_it() {
    let mut serve = common::kvxfer();
    serve.args(["serve", "--listen", "0.0.0.0:0"]).env("KVXFER_TOKEN", "abcdef");
    let serve = Proc::start(&mut serve, "kvxfer serve with a 6-character token".into()).finish();
    serve.expect_code(2);
    let rule = serve.one_error().split_once("0.0.0.0:0: ").map(|(_, rule)| rule.to_string()).unwrap();
    assert!(rule.contains("6 characters"), "{rule}");

    let mut cluster = clean(Command::new(common::bin()));
    cluster.args(["cluster", "--sizes", "1MiB", "--coordinator", "10.255.255.1:18600", "--rendezvous-timeout", "2s"]);
    cluster.env("KVXFER_RANK", "0").env("KVXFER_WORLD_SIZE", "2").env("KVXFER_TOKEN", "abcdef");
    let out = Proc::start(&mut cluster, "kvxfer cluster with a 6-character token".into()).finish();
    out.expect_code(2);
    assert!(out.stderr.contains(&rule), "cluster does not give serve's rule {rule:?}:\n{}", out.stderr);
    assert!(out.stderr.contains("the coordinator 10.255.255.1:18600"), "{}", out.stderr);
}
