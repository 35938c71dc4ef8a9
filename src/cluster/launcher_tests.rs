use super::*;

fn env(pairs: &[(&str, &str)]) -> EnvMap {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn usage_text(result: Result<impl std::fmt::Debug>) -> String {
    let err = result.expect_err("expected a usage error");
    assert_eq!(crate::error::exit_code(&err), 2, "not a usage error: {err:#}");
    let text = format!("{err:#}");
    assert!(!text.contains('\n'), "more than one line: {text}");
    text
}

fn no_expand(_: &str) -> Result<Vec<String>> {
    panic!("the nodelist must not be expanded here")
}

fn no_pmix() -> Result<PmixReply> {
    Ok(PmixReply::Unreachable("no PMIx in this test".into()))
}

fn not_asked() -> Result<PmixReply> {
    panic!("PMIx must not be asked here")
}

#[test]
fn each_launcher_alone() {
    let cases = [
        (
            env(&[("SLURM_PROCID", "2"), ("SLURM_NTASKS", "4"), ("SLURM_LOCALID", "1"), ("SLURM_STEP_ID", "0")]),
            Launcher::Slurm,
        ),
        (env(&[("PMIX_RANK", "2"), ("PMIX_SIZE", "4"), ("PMIX_LOCAL_RANK", "1")]), Launcher::Pmix),
        (
            env(&[("OMPI_COMM_WORLD_RANK", "2"), ("OMPI_COMM_WORLD_SIZE", "4"), ("OMPI_COMM_WORLD_LOCAL_RANK", "1")]),
            Launcher::OpenMpi,
        ),
        (env(&[("RANK", "2"), ("WORLD_SIZE", "4"), ("LOCAL_RANK", "1")]), Launcher::Torchrun),
        (env(&[("KVXFER_RANK", "2"), ("KVXFER_WORLD_SIZE", "4"), ("KVXFER_LOCAL_RANK", "1")]), Launcher::Kvxfer),
    ];
    for (vars, launcher) in cases {
        let info = discover(&vars).unwrap();
        assert_eq!(info, RankInfo { launcher, rank: 2, world_size: 4, local_rank: 1 }, "{vars:?}");
    }
}

#[test]
fn the_innermost_launcher_wins() {
    // srun with MpiDefault=pmix sets PMIX_RANK as well: the launcher is Slurm.
    let srun = env(&[("SLURM_PROCID", "1"), ("SLURM_NTASKS", "2"), ("SLURM_STEP_ID", "0"), ("PMIX_RANK", "1")]);
    assert_eq!(discover(&srun).unwrap().launcher, Launcher::Slurm);
    // mpirun sets PMIX_RANK too, and inside an sbatch script inherits the batch step's SLURM_PROCID=0.
    let mpirun_in_sbatch = env(&[
        ("SLURM_PROCID", "0"),
        ("SLURM_NTASKS", "1"),
        ("PMIX_RANK", "3"),
        ("OMPI_COMM_WORLD_RANK", "3"),
        ("OMPI_COMM_WORLD_SIZE", "4"),
    ]);
    let info = discover(&mpirun_in_sbatch).unwrap();
    assert_eq!((info.launcher, info.rank, info.world_size), (Launcher::OpenMpi, 3, 4));
    // torchrun started by srun: every worker sees the srun task's SLURM_PROCID.
    let torchrun_in_srun = env(&[
        ("SLURM_PROCID", "0"),
        ("SLURM_NTASKS", "1"),
        ("SLURM_STEP_ID", "0"),
        ("RANK", "5"),
        ("WORLD_SIZE", "8"),
        ("LOCAL_RANK", "5"),
    ]);
    assert_eq!(discover(&torchrun_in_srun).unwrap().launcher, Launcher::Torchrun);
    // KVXFER_RANK is set on purpose: it overrides everything.
    let mut explicit = torchrun_in_srun.clone();
    explicit.extend(env(&[("KVXFER_RANK", "0"), ("KVXFER_WORLD_SIZE", "2")]));
    assert_eq!(
        discover(&explicit).unwrap(),
        RankInfo { launcher: Launcher::Kvxfer, rank: 0, world_size: 2, local_rank: 0 }
    );
}

#[test]
fn a_batch_script_is_not_a_launch() {
    let batch = env(&[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "4"), ("SLURM_JOB_NODELIST", "n1")]);
    let text = usage_text(discover(&batch));
    assert!(text.contains("SLURM_STEP_ID") && text.contains("srun"), "{text}");
}

#[test]
fn pmix_size_falls_back_to_openmpi_variables() {
    let vars = env(&[("PMIX_RANK", "1"), ("OMPI_UNIVERSE_SIZE", "3")]);
    assert_eq!(discover(&vars).unwrap(), RankInfo { launcher: Launcher::Pmix, rank: 1, world_size: 3, local_rank: 0 });
    let text = usage_text(discover(&env(&[("PMIX_RANK", "1")])));
    assert!(text.contains("PMIX_SIZE"), "{text}");
}

#[test]
fn inconsistent_values_name_the_variable() {
    let cases: [(&[(&str, &str)], &str); 7] = [
        (&[("KVXFER_RANK", "4"), ("KVXFER_WORLD_SIZE", "4")], "KVXFER_RANK=4"),
        (&[("KVXFER_RANK", "x"), ("KVXFER_WORLD_SIZE", "4")], "KVXFER_RANK=\"x\""),
        (&[("KVXFER_RANK", "0")], "KVXFER_WORLD_SIZE"),
        (&[("RANK", "0"), ("WORLD_SIZE", "0")], "WORLD_SIZE=0"),
        (&[("RANK", "0"), ("WORLD_SIZE", "-2")], "WORLD_SIZE=\"-2\""),
        (&[("RANK", "1"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "two")], "LOCAL_RANK=\"two\""),
        (
            &[("SLURM_PROCID", "1"), ("SLURM_NTASKS", "4"), ("SLURM_STEPID", "0"), ("SLURM_LOCALID", "9")],
            "SLURM_LOCALID=9",
        ),
    ];
    for (vars, needle) in cases {
        let text = usage_text(discover(&env(vars)));
        assert!(text.contains(needle), "{vars:?}: {text}");
    }
}

#[test]
fn no_launcher_is_a_usage_error() {
    let text = usage_text(discover(&env(&[("HOME", "/root")])));
    assert!(text.contains("KVXFER_RANK") && text.contains("srun"), "{text}");
}

#[test]
fn coordinator_from_the_flag_first() {
    let vars = env(&[("MASTER_ADDR", "m"), ("MASTER_PORT", "1"), ("SLURM_JOB_NODELIST", "n[1-2]")]);
    let c = resolve_coordinator(Some("head:9000"), &vars, no_expand, not_asked).unwrap();
    assert_eq!((c.host.as_str(), c.port, c.source), ("head", 9000, CoordinatorSource::Flag));
    let v6 = resolve_coordinator(Some("[fe80::1]:9000"), &vars, no_expand, not_asked).unwrap();
    assert_eq!((v6.host.as_str(), v6.address()), ("fe80::1", "[fe80::1]:9000".to_string()));
    for bad in ["head", "head:0", "head:x", ":9000", "head:70000"] {
        let text = usage_text(resolve_coordinator(Some(bad), &vars, no_expand, not_asked));
        assert!(text.contains("--coordinator"), "{bad}: {text}");
    }
}

#[test]
fn coordinator_from_master_addr() {
    let vars = env(&[("MASTER_ADDR", "10.0.0.1"), ("MASTER_PORT", "29500"), ("SLURM_JOB_NODELIST", "n1")]);
    let c = resolve_coordinator(None, &vars, no_expand, not_asked).unwrap();
    assert_eq!((c.address(), c.source), ("10.0.0.1:29500".to_string(), CoordinatorSource::MasterAddr));
    let text = usage_text(resolve_coordinator(None, &env(&[("MASTER_ADDR", "m")]), no_expand, not_asked));
    assert!(text.contains("MASTER_PORT"), "{text}");
    let text = usage_text(resolve_coordinator(
        None,
        &env(&[("MASTER_ADDR", "m"), ("MASTER_PORT", "p")]),
        no_expand,
        not_asked,
    ));
    assert!(text.contains("MASTER_PORT=\"p\""), "{text}");
}

#[test]
fn coordinator_from_the_slurm_nodelist() {
    let vars = env(&[("SLURM_JOB_NODELIST", "gpu[07-09]"), ("SLURM_JOB_ID", "123456")]);
    let expand = |list: &str| {
        assert_eq!(list, "gpu[07-09]");
        Ok(vec!["gpu07".to_string(), "gpu08".into(), "gpu09".into()])
    };
    let c = resolve_coordinator(None, &vars, expand, no_pmix).unwrap();
    assert_eq!((c.address(), c.source), ("gpu07:19056".to_string(), CoordinatorSource::SlurmNodelist));
    let no_job = env(&[("SLURM_JOB_NODELIST", "n1")]);
    assert_eq!(resolve_coordinator(None, &no_job, |_| Ok(vec!["n1".into()]), no_pmix).unwrap().port, SLURM_BASE_PORT);
    let text = usage_text(resolve_coordinator(None, &no_job, |_| Ok(vec![]), no_pmix));
    assert!(text.contains("--coordinator"), "{text}");
}

#[test]
fn no_coordinator_names_the_flag() {
    let text = usage_text(resolve_coordinator(None, &env(&[("KVXFER_RANK", "1")]), no_expand, no_pmix));
    assert!(text.contains("--coordinator"), "{text}");
}

#[test]
fn pmix_comes_before_the_slurm_nodelist() {
    let vars = env(&[("SLURM_JOB_NODELIST", "n1"), ("PMIX_NAMESPACE", "slurm.pmix.7.0"), ("PMIX_RANK", "1")]);
    let published = || {
        let c =
            Coordinator { host: "n2".into(), port: 40000, source: CoordinatorSource::Pmix, bound: Default::default() };
        Ok(PmixReply::Met(c))
    };
    let c = resolve_coordinator(None, &vars, no_expand, published).unwrap();
    assert_eq!((c.address(), c.source), ("n2:40000".to_string(), CoordinatorSource::Pmix));
    // No PMIx: the nodelist.
    let c = resolve_coordinator(None, &vars, |_| Ok(vec!["n1".into()]), no_pmix).unwrap();
    assert_eq!(c.source, CoordinatorSource::SlurmNodelist);
}

#[test]
fn every_rank_local_without_pmix_meets_on_loopback_at_a_port_every_rank_derives_alike() {
    let job = |id: &str| {
        env(&[
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "4"),
            ("PMIX_NAMESPACE", id),
            ("PMIX_RANK", "3"),
        ])
    };
    let c = resolve_coordinator(None, &job("1354498049"), no_expand, no_pmix).unwrap();
    assert_eq!(c.host, "127.0.0.1");
    assert!((LOCAL_BASE_PORT..LOCAL_BASE_PORT + 1000).contains(&c.port), "{}", c.port);
    assert_eq!(c.source, CoordinatorSource::LocalLoopback { no_pmix: "no PMIx in this test".into() });
    // The same job: the same port (FNV-1a, not a per-process seeded hash); another job: most likely another.
    assert_eq!(resolve_coordinator(None, &job("1354498049"), no_expand, no_pmix).unwrap().port, c.port);
    assert_ne!(resolve_coordinator(None, &job("1354498050"), no_expand, no_pmix).unwrap().port, c.port);
    // ORTE's job id serves when PMIx's namespace is not there.
    let orte =
        env(&[("OMPI_COMM_WORLD_SIZE", "2"), ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"), ("OMPI_MCA_ess_base_jobid", "7")]);
    assert!(matches!(
        resolve_coordinator(None, &orte, no_expand, no_pmix).unwrap().source,
        CoordinatorSource::LocalLoopback { .. }
    ));
}

#[test]
fn no_coordinator_says_what_was_tried() {
    // Ranks on two hosts (2 of 4 here), no PMIx: nothing to go on.
    let vars = env(&[("OMPI_COMM_WORLD_SIZE", "4"), ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"), ("PMIX_NAMESPACE", "1")]);
    let text = usage_text(resolve_coordinator(None, &vars, no_expand, no_pmix));
    assert!(text.contains("--coordinator") && text.contains("no PMIx in this test"), "{text}");
    assert!(text.contains("every rank is on this host"), "{text}");
    // All local but nothing every rank shares to derive a port from.
    let vars = env(&[("OMPI_COMM_WORLD_SIZE", "4"), ("OMPI_COMM_WORLD_LOCAL_SIZE", "4")]);
    let text = usage_text(resolve_coordinator(None, &vars, no_expand, no_pmix));
    assert!(text.contains("PMIX_NAMESPACE"), "{text}");
}

#[test]
fn pmix_is_asked_only_where_a_server_launched_this_process_and_kvxfer_pmix_is_not_off() {
    let server = [("PMIX_NAMESPACE", "1354498049"), ("PMIX_RANK", "0")];
    assert_eq!(pmix_skipped(&env(&server)).unwrap(), None);
    let why = pmix_skipped(&env(&[("PMIX_RANK", "0")])).unwrap().unwrap();
    assert!(why.contains("PMIX_NAMESPACE"), "{why}");
    let off: Vec<(&str, &str)> = server.iter().copied().chain([("KVXFER_PMIX", "off")]).collect();
    assert_eq!(pmix_skipped(&env(&off)).unwrap().as_deref(), Some("KVXFER_PMIX=off"));
    let text = usage_text(pmix_skipped(&env(&[("KVXFER_PMIX", "no")])));
    assert!(text.contains("KVXFER_PMIX=\"no\""), "{text}");
}

#[test]
fn every_rank_is_local_when_the_launcher_says_so() {
    assert!(all_ranks_local(&env(&[("OMPI_COMM_WORLD_SIZE", "4"), ("OMPI_COMM_WORLD_LOCAL_SIZE", "4")])));
    assert!(!all_ranks_local(&env(&[("OMPI_COMM_WORLD_SIZE", "4"), ("OMPI_COMM_WORLD_LOCAL_SIZE", "2")])));
    assert!(all_ranks_local(&env(&[("SLURM_STEP_NUM_NODES", "1")])));
    assert!(!all_ranks_local(&env(&[("SLURM_STEP_NUM_NODES", "2")])));
    assert!(!all_ranks_local(&env(&[("KVXFER_RANK", "0")])), "nothing said: not local");
}
