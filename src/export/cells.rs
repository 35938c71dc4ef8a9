//! The per-size table's cells and the notes under it: one text for the results Markdown, and (through `output`)
//! the live console rows and `report`'s boxed tables.

use crate::measure::{CaseExtras, ExtrasNotes};
use crate::plan::paged::Layout;
use crate::plan::sizes::{format_size, format_tokens};
use crate::stats::{ceiling, modes::format_gbps, warnings, CaseResult, CeilingVerdict, WarningKind};

pub const CASE_HEADER: &[&str] =
    &["size", "tokens", "n", "p50 ms", "95% CI ms", "min ms", "max ms", "p50 GB/s", "max GB/s", "block", "verified"];

fn ms(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

pub fn case_cells(c: &CaseResult) -> Vec<String> {
    vec![
        format_size(c.size_bytes),
        c.tokens.map(format_tokens).unwrap_or_else(|| "-".into()),
        c.stats.n.to_string(),
        ms(c.stats.transfer_ms.p50),
        // The median's interval (stats::confidence); `~` marks one below 95% coverage (n ≤ 5).
        match &c.derived.p50_ci {
            Some(ci) => format!(
                "{}{}–{}",
                if ci.coverage < ci.level { "~" } else { "" },
                ms(ci.transfer_ms[0]),
                ms(ci.transfer_ms[1])
            ),
            None => "-".into(),
        },
        ms(c.stats.transfer_ms.min),
        ms(c.stats.transfer_ms.max),
        format!("{:.2}", c.stats.gbps.p50),
        format!("{:.2}", c.stats.gbps.max),
        // Paged cases are marked `p`: their block is one piece of one layer's K or V.
        format!(
            "{}{}",
            format_size(c.shape.block_size),
            if c.shape.block_clamped {
                "*"
            } else if c.shape.layout == Layout::Paged {
                " p"
            } else {
                ""
            }
        ),
        match (c.check.verified, c.check.mismatched_bytes) {
            (Some(true), _) => "ok".into(),
            // A bidirectional case's bad bytes are both directions'.
            (Some(false), Some(n)) => {
                match n.saturating_add(c.bidir.as_ref().and_then(|b| b.reverse_mismatched_bytes).unwrap_or(0)) {
                    // No byte found bad, but the receiver counted none of some reps.
                    0 if c.check.unchecked_reps.is_some() => "unchecked".into(),
                    bad => format!("{bad} bad"),
                }
            }
            _ => "-".into(),
        },
    ]
}

/// The column a run over one connection that timed its setup adds after [`CASE_HEADER`]'s (and [`BIDIR_HEADER`]'s):
/// the transport's connection setup (verbs: opening the device and creating the queue pairs until they are ready to
/// send, the address exchange included, registration excluded). Every row of the run shares that connection, so
/// every row shows the same time.
pub const CONNECT_HEADER: &str = "connect ms";

/// A run's connection setup time, as its transport recorded it (`transport_detail.sender.connect_ms`); `None` where
/// it recorded none (tcp, cuda, engines; a sweep file's sessions, each of which has its own).
pub fn connect_ms(transport_detail: &serde_json::Value) -> Option<f64> {
    transport_detail.get("sender")?.get("connect_ms")?.as_f64()
}

/// The [`CONNECT_HEADER`] cell.
pub fn connect_cell(connect_ms: f64) -> String {
    ms(connect_ms)
}

/// The columns a bidirectional run (`--bidir`) adds after [`CASE_HEADER`]'s, where any of its cases is one.
pub const BIDIR_HEADER: &[&str] = &["reverse p50 GB/s", "aggregate p50 GB/s"];

/// Whether any of `cases` ran both ways at once (its table then has [`BIDIR_HEADER`]'s columns).
pub fn any_bidir(cases: &[CaseResult]) -> bool {
    cases.iter().any(|c| c.bidir.is_some())
}

/// A case's [`BIDIR_HEADER`] cells (`-` for a one-way case).
pub fn bidir_cells(c: &CaseResult) -> Vec<String> {
    match &c.bidir {
        Some(b) => vec![format!("{:.2}", b.reverse_gbps.p50), format!("{:.2}", b.aggregate_gbps.p50)],
        None => vec!["-".into(), "-".into()],
    }
}

/// What a live row adds for a bidirectional case, whose columns are the forward direction's.
pub fn bidir_inline(c: &CaseResult) -> Option<String> {
    c.bidir
        .as_ref()
        .map(|b| format!("⇄ reverse {:.2} GB/s, aggregate {:.2} GB/s (p50)", b.reverse_gbps.p50, b.aggregate_gbps.p50))
}

/// What the columns of a bidirectional run measure, under its table.
pub fn bidir_note(cases: &[CaseResult]) -> Option<String> {
    any_bidir(cases).then(|| {
        "⇄ --bidir: both ends sent at once; ms and GB/s are the sender → receiver direction's, reverse the receiver → sender one's, aggregate both directions' bytes over each rep's span from the common start to the later finish".to_string()
    })
}

/// The extras of `cases` as their transports' notes read them (`names`: each case's [`case_name`]).
pub fn case_extras<'a>(cases: &'a [CaseResult], names: &'a [String]) -> Vec<CaseExtras<'a>> {
    cases.iter().zip(names).map(|(c, name)| CaseExtras { name, extras: &c.extras, writes: c.shape.writes }).collect()
}

/// The lines printed under a run's table: its ceiling, every bimodal size, every other warning, and the count;
/// then what the transports say about their extras (how staged cases split their time, how many work requests
/// SGE gathering left, each rail's rate), and why spread cases were slow.
pub fn notes(cases: &[CaseResult], extras: &dyn ExtrasNotes) -> Vec<String> {
    let names: Vec<String> = cases.iter().map(case_name).collect();
    let transport_notes = extras.notes(&case_extras(cases, &names)).into_iter().map(|n| n.line);
    let others = cases.iter().filter_map(|c| {
        let rest: Vec<_> = c.derived.warnings.iter().filter(|w| w.kind != WarningKind::Bimodal).cloned().collect();
        (!rest.is_empty()).then(|| format!("{} at {}", warnings::describe(&rest), case_name(c)))
    });
    ceiling_note(cases)
        .into_iter()
        .chain(cases.iter().filter_map(bimodal_note))
        .chain(others)
        .chain(std::iter::once(warning_summary(cases)))
        .chain(ci_note(cases))
        .chain(bidir_note(cases))
        .chain(transport_notes)
        .chain(cases.iter().filter_map(why_note))
        .collect()
}

/// The attribution of a bimodal or spread case: "why at 64 MiB: 4 slow of 8 reps; slow vs fast: ...".
pub fn why_note(c: &CaseResult) -> Option<String> {
    c.host.attribution.as_ref().map(|a| format!("why at {}: {}", case_name(c), a.verdict))
}

/// "3 of 9 cases carry warnings (high CV 2, cold first rep 1)", or that none do.
pub fn warning_summary(cases: &[CaseResult]) -> String {
    let warned = cases.iter().filter(|c| !c.derived.warnings.is_empty()).count();
    if warned == 0 {
        return format!("{} case(s), none with warnings", cases.len());
    }
    let mut kinds: Vec<(&WarningKind, usize)> = Vec::new();
    for w in cases.iter().flat_map(|c| &c.derived.warnings) {
        match kinds.iter_mut().find(|(k, _)| **k == w.kind) {
            Some((_, n)) => *n += 1,
            None => kinds.push((&w.kind, 1)),
        }
    }
    let kinds: Vec<String> = kinds.iter().map(|(k, n)| format!("{} {n}", k.label())).collect();
    format!("⚠ {warned} of {} case(s) carry warnings ({})", cases.len(), kinds.join(", "))
}

/// Explains `~` in the CI column when some case has too few reps for a 95% interval, with the coverage at each
/// rep count that fell short (as those cases ran them).
pub fn ci_note(cases: &[CaseResult]) -> Option<String> {
    let mut short: Vec<(usize, f64)> = Vec::new();
    for c in cases {
        if let Some(ci) = c.derived.p50_ci.as_ref().filter(|ci| ci.coverage < ci.level) {
            if !short.iter().any(|(n, _)| *n == c.stats.n) {
                short.push((c.stats.n, ci.coverage));
            }
        }
    }
    if short.is_empty() {
        return None;
    }
    short.sort_by_key(|(n, _)| *n);
    let at: Vec<String> = short.iter().map(|(n, cov)| format!("{:.1}% at n = {n}", cov * 100.0)).collect();
    Some(format!(
        "~ fewer than 6 reps: the CI is [min, max] and covers the median with less than 95% ({})",
        at.join(", ")
    ))
}

/// The size, and the sweep case's name when it has one.
pub fn case_name(c: &CaseResult) -> String {
    match &c.sweep.case_label {
        Some(l) => format!("{} ({l})", format_size(c.size_bytes)),
        None => format_size(c.size_bytes),
    }
}

/// "ceiling 394.1 GB/s (p50 flat within ±5% from 96 MiB to 12 GiB)", when the run has a plateau; why there is none
/// when its plateau's cases are too noisy to support one.
pub fn ceiling_note(cases: &[CaseResult]) -> Option<String> {
    // A sweep over several configurations has one curve per configuration, not one ceiling.
    if cases.iter().any(|c| c.sweep.case_label != cases[0].sweep.case_label) {
        return None;
    }
    let verdict = ceiling::verdict(cases);
    if let CeilingVerdict::Ceiling(c) = verdict {
        return Some(format!(
            "ceiling {} GB/s (p50 flat within ±5% from {} to {})",
            format_gbps(c.gbps),
            format_size(c.first_size),
            format_size(c.last_size)
        ));
    }
    verdict.refusal()
}

/// "⚠ bimodal at 12 GiB: 3.41 / 9.70 GB/s (2 + 3 of 5 reps)", when the size is bimodal.
pub fn bimodal_note(c: &CaseResult) -> Option<String> {
    let modes = c.derived.bimodal.describe()?;
    let counts: Vec<String> = c.derived.bimodal.counts.iter().map(|n| n.to_string()).collect();
    Some(format!("⚠ bimodal at {}: {modes} ({} of {} reps)", case_name(c), counts.join(" + "), c.stats.n))
}
