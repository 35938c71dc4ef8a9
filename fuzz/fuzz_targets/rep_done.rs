//! A receiver's RepDone as the sender decodes and checks it before recording the rep (`run::peer_check`): the first
//! 17 bytes pick what the sender saw of the rep (its size, its wall time, whether `--verify` was asked), the rest is
//! the control message. No panic; anything accepted has every receiver time finite and within the sender's own
//! bound, a mismatch count within the rep's bytes, and "unchecked" exactly when `--verify` got no count.
#![no_main]
use kvxfer::control::Msg;
use kvxfer::run::peer_check::{check_report, RepSeen, Verdict, TIME_SLACK};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 17 {
        return;
    }
    let size_bytes = u64::from_le_bytes(data[..8].try_into().unwrap());
    // A wall time as the sender measures one: finite, not negative.
    let wall_ms = f64::from_le_bytes(data[8..16].try_into().unwrap()).abs();
    if !wall_ms.is_finite() {
        return;
    }
    let seen = RepSeen { size_bytes, verify: data[16] & 1 == 1, wall_ms };
    let Ok(Msg::RepDone(report)) = serde_json::from_slice::<Msg>(&data[17..]) else { return };
    let Ok(verdict) = check_report(&report, &seen) else { return };
    let bound = TIME_SLACK * wall_ms;
    let within = |ms: f64| ms.is_finite() && (0.0..=bound).contains(&ms);
    if let Some(ms) = report.transfer_ms {
        assert!(within(ms) && ms > 0.0, "transfer_ms {ms} accepted against {wall_ms}");
    }
    assert!(within(report.notify_ms));
    assert!(report.verify_ms.is_none_or(within));
    if let Some(r) = report.reverse {
        assert!(within(r.transfer_ms) && r.transfer_ms > 0.0 && within(r.elapsed_ms));
    }
    assert!(report.t_rep_start_ms.is_finite() && report.t_landed_ms.is_finite());
    assert!(report.mismatched_bytes.is_none_or(|bad| bad <= size_bytes));
    assert_eq!(verdict == Verdict::Unchecked, seen.verify && report.mismatched_bytes.is_none());
});
