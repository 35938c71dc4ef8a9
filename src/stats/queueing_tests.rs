use super::*;
use crate::stats::replay::knee;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp};

/// `n` requests of `bytes` each with Poisson arrivals at `per_s`.
fn poisson(n: u64, per_s: f64, bytes: u64, seed: u64) -> Vec<Scheduled> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let gap = Exp::new(per_s / 1e3).unwrap();
    let mut at = 0.0;
    (0..n)
        .map(|id| {
            at += gap.sample(&mut rng);
            Scheduled { id, at_ms: at, bytes, cached_bytes: 0, output_tokens: 0 }
        })
        .collect()
}

fn at(times: &[f64], bytes: u64) -> Vec<Scheduled> {
    times
        .iter()
        .enumerate()
        .map(|(i, &t)| Scheduled { id: i as u64, at_ms: t, bytes, cached_bytes: 0, output_tokens: 0 })
        .collect()
}

/// A bandwidth-only curve: 1 GB/s (1 MB per ms).
fn one_gbps() -> Curve {
    Curve::new(&[(1e6, 1.0), (1e8, 100.0)]).unwrap()
}

#[test]
fn an_m_d_1_queue_waits_as_pollaczek_khinchine_says() {
    // 10 ms of service, 50 arrivals/s: ρ = 0.5, Wq = ρ·D / (2(1 − ρ)) = 5 ms.
    let schedule = poisson(200_000, 50.0, 10_000_000, 7);
    let run = simulate(&schedule, 1, |b| one_gbps().service_ms(b).0);
    let mean_wait = run.records.iter().map(|r| r.queue_ms).sum::<f64>() / run.records.len() as f64;
    assert!((mean_wait - 5.0).abs() < 0.15, "mean wait {mean_wait} ms, Pollaczek–Khinchine says 5 ms");
    assert!(run.records.iter().all(|r| (r.service_ms - 10.0).abs() < 1e-6 && r.latency_ms > r.service_ms - 1e-6));
    // The summary's histogram mean agrees with the records'.
    let s = LoadSummary::of(&run, &schedule, None, None);
    assert!((s.queue_ms.unwrap().mean - mean_wait).abs() < 0.05, "{:?}", s.queue_ms);
}

#[test]
fn two_servers_share_what_one_queues() {
    // Three requests due at once, 10 ms each: one session finishes them at 10, 20, 30 ms; two at 10, 10, 20.
    let schedule = at(&[0.0, 0.0, 0.0], 10_000_000);
    let latency =
        |servers| -> Vec<f64> { simulate(&schedule, servers, |_| 10.0).records.iter().map(|r| r.latency_ms).collect() };
    assert_eq!(latency(1), vec![10.0, 20.0, 30.0]);
    assert_eq!(latency(2), vec![10.0, 10.0, 20.0]);
    let lanes: Vec<u32> = simulate(&schedule, 2, |_| 10.0).records.iter().map(|r| r.lane).collect();
    assert_eq!(lanes, vec![0, 1, 0]);
    // At ρ = 0.9 for one session, a second takes nearly all the waiting away.
    let busy = poisson(50_000, 90.0, 10_000_000, 3);
    let mean_wait = |servers| {
        let run = simulate(&busy, servers, |b| one_gbps().service_ms(b).0);
        run.records.iter().map(|r| r.queue_ms).sum::<f64>() / run.records.len() as f64
    };
    let (one, two) = (mean_wait(1), mean_wait(2));
    // M/D/1 at ρ = 0.9: Wq = 0.9·10 / (2·0.1) = 45 ms.
    assert!((one - 45.0).abs() < 0.1 * 45.0, "one session: {one} ms");
    assert!(two < one / 10.0, "two sessions: {two} ms against one's {one} ms");
}

#[test]
fn a_saturated_stream_falls_behind_and_shows_a_knee() {
    // 1 GB/s of path: 10 MB every 5 ms offers 2 GB/s at speed 1 and 0.5 GB/s at speed 0.25.
    let times: Vec<f64> = (0..400).map(|i| i as f64 * 5.0).collect();
    let slow: Vec<Scheduled> = at(&times.iter().map(|t| t * 4.0).collect::<Vec<_>>(), 10_000_000);
    let fast = at(&times, 10_000_000);
    let p = predict_loads(&one_gbps(), &[(1.0, fast.clone()), (0.25, slow)], 1);
    let (fast_s, slow_s) = (&p[0].summary, &p[1].summary);
    assert_eq!(slow_s.queue_ms.unwrap().max, 0.001, "under capacity nothing waits (HDR's 1 µs floor)");
    let (a, o) = (fast_s.achieved_gbps.unwrap(), fast_s.offered_gbps.unwrap());
    assert!((a - 1.0).abs() < 0.01 && (o - 2.0).abs() < 0.01, "achieved {a}, offered {o}");
    // The queue grows by 5 ms a request: the last waits about 400 × 5 ms.
    let last = simulate(&fast, 1, |b| one_gbps().service_ms(b).0).records.last().unwrap().queue_ms;
    assert!((last - 1995.0).abs() < 1e-6, "{last}");
    let points: Vec<(f64, &LoadSummary)> = p.iter().map(|l| (l.load, &l.summary)).collect();
    assert_eq!(knee(&points).unwrap().load, 1.0);
    assert_eq!(p[0].summary.utilization.map(|u| (u * 100.0).round()), Some(100.0));
}

#[test]
fn requests_off_the_curve_are_counted_and_the_large_ones_take_the_ceiling_bandwidth() {
    // Latency-bound below 1 MB, 2 GB/s at 100 MB (the ceiling), 1.6 GB/s at 10 MB.
    let curve = Curve::new(&[(1e3, 0.05), (1e7, 6.25), (1e8, 50.0)]).unwrap();
    assert!((curve.ceiling_gbps() - 2.0).abs() < 1e-12);
    let (t, b) = curve.service_ms(300_000_000);
    assert_eq!(b, Basis::ExtrapolatedAbove);
    assert!((t - 150.0).abs() < 1e-9, "{t}");
    assert_eq!(curve.service_ms(0), (0.0, Basis::Measured));
    assert_eq!(curve.service_ms(10_000_000), (6.25, Basis::Measured));
    let schedule = vec![
        Scheduled { id: 0, at_ms: 0.0, bytes: 100, cached_bytes: 0, output_tokens: 0 },
        Scheduled { id: 1, at_ms: 1.0, bytes: 0, cached_bytes: 4096, output_tokens: 0 },
        Scheduled { id: 2, at_ms: 2.0, bytes: 300_000_000, cached_bytes: 0, output_tokens: 0 },
    ];
    let p = &predict_loads(&curve, &[(1.0, schedule)], 4)[0];
    assert_eq!((p.above_range, p.below_range), (1, 1));
    assert_eq!(p.summary.bytes_saved, 4096);
    assert_eq!(p.summary.requests, 3);
    assert!(Curve::new(&[(0.0, 1.0), (1e6, 0.0)]).is_none());
}

#[test]
fn a_pool_makes_requests_wait_for_frees_in_arrival_order() {
    // 10 blocks of one 1-byte token; each request holds its blocks 10 ms per output token after it lands.
    let pool = SimPool { blocks: 10, block_tokens: 1, bytes_per_token: 1, decode_ms_per_token: 10.0 };
    let req = |id: u64, at_ms: f64, bytes: u64| Scheduled { id, at_ms, bytes, cached_bytes: 0, output_tokens: 1 };
    let schedule = [req(0, 0.0, 6), req(1, 1.0, 6), req(2, 2.0, 2)];
    let run = simulate_pooled(&schedule, 2, |_| 1.0, Some(pool));
    let r = &run.records;
    // 0 takes 6 at 0 and lands at 1, holding them until 11; 1 finds 4 free and waits until 11; 2 has room from
    // the start but queues behind 1 for its turn.
    assert_eq!((r[0].start_ms, r[0].pool_wait_ms, r[0].blocks), (0.0, Some(0.0), Some(6)));
    assert_eq!((r[1].start_ms, r[1].pool_wait_ms), (11.0, Some(10.0)));
    assert_eq!((r[2].start_ms, r[2].pool_wait_ms, r[2].latency_ms), (11.0, Some(9.0), 10.0));
    assert_eq!(run.pool.map(|p| (p.blocks, p.high_water_blocks)), Some((10, 8)));
    // Without decode holding them, blocks free as each request lands: nobody waits past its session.
    let quick = SimPool { decode_ms_per_token: 0.0, ..pool };
    let run = simulate_pooled(&schedule, 2, |_| 1.0, Some(quick));
    assert!(run.records.iter().all(|q| q.pool_wait_ms == Some(0.0)), "{:?}", run.records);
    assert_eq!(simulate(&schedule, 2, |_| 1.0).records[1].start_ms, 1.0, "no pool: no wait");
}
