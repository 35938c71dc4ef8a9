//! A cluster replay's numbers beyond one load's summary: the same requests cut by link (prefill rank → decode
//! rank) and by rank, so that the incast on a decode rank and the imbalance between links show beside the totals.
//! Every group's GB/s is its bytes over the whole load's wall time (the same time for all), so the links' GB/s add
//! up to the load's achieved GB/s, and so do the decode ranks'.

use super::Quantiles;
use crate::run::replay::RequestRecord;
use serde::{Deserialize, Serialize};

/// The results' `replay.cluster`: who sent and who received, and how requests were routed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterReplayJson {
    pub prefill: Vec<usize>,
    pub decode: Vec<usize>,
    /// `round-robin` or `least-loaded` (`--route`).
    pub route: String,
    /// The links that carried requests (src, dst), each a session of its own.
    pub links: Vec<[usize; 2]>,
}

/// A load's requests of one group (a link or a rank).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupSummary {
    pub requests: u64,
    pub bytes_moved: u64,
    /// Bytes moved ÷ the load's wall time (first request's start to last request's end over the whole run).
    pub gbps: Option<f64>,
    /// Scheduled arrival → last byte landed.
    pub latency_ms: Option<Quantiles>,
    /// Scheduled arrival → first byte posted: the wait behind this link's (or rank's) earlier requests.
    pub queue_ms: Option<Quantiles>,
}

impl GroupSummary {
    fn of<'a>(recs: impl Iterator<Item = &'a RequestRecord> + Clone, wall_ms: f64) -> GroupSummary {
        let bytes_moved: u64 = recs.clone().map(|r| r.bytes).sum();
        GroupSummary {
            requests: recs.clone().count() as u64,
            bytes_moved,
            gbps: (wall_ms > 0.0).then(|| bytes_moved as f64 / 1e9 / (wall_ms / 1e3)),
            latency_ms: Quantiles::of(recs.clone().map(|r| r.latency_ms)),
            queue_ms: Quantiles::of(recs.map(|r| r.queue_ms)),
        }
    }
}

/// One link's share of a load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkSummary {
    pub src: usize,
    pub dst: usize,
    #[serde(flatten)]
    pub summary: GroupSummary,
}

/// One rank's share of a load: a prefill rank's requests sent, a decode rank's received.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankSummary {
    pub rank: usize,
    /// `prefill` or `decode`.
    pub role: String,
    #[serde(flatten)]
    pub summary: GroupSummary,
}

/// The results' `replay.loads[].cluster`: the load's requests by link and by rank.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadClusterJson {
    pub links: Vec<LinkSummary>,
    pub ranks: Vec<RankSummary>,
}

impl LoadClusterJson {
    /// The per-link and per-rank summaries of `records` (each with its `src` and `dst`) over `links`, the load's
    /// wall time `wall_ms`. Every link and rank is listed, with no request if none came its way.
    pub fn of(records: &[RequestRecord], links: &[[usize; 2]], cl: &ClusterReplayJson, wall_ms: f64) -> Self {
        let links = links
            .iter()
            .map(|&[src, dst]| {
                let recs = records.iter().filter(move |r| r.src == Some(src) && r.dst == Some(dst));
                LinkSummary { src, dst, summary: GroupSummary::of(recs, wall_ms) }
            })
            .collect();
        let prefill = cl.prefill.iter().map(|&rank| {
            let recs = records.iter().filter(move |r| r.src == Some(rank));
            RankSummary { rank, role: "prefill".into(), summary: GroupSummary::of(recs, wall_ms) }
        });
        let decode = cl.decode.iter().map(|&rank| {
            let recs = records.iter().filter(move |r| r.dst == Some(rank));
            RankSummary { rank, role: "decode".into(), summary: GroupSummary::of(recs, wall_ms) }
        });
        LoadClusterJson { links, ranks: prefill.chain(decode).collect() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(id: u64, src: usize, dst: usize, bytes: u64, latency_ms: f64) -> RequestRecord {
        RequestRecord {
            id,
            scheduled_ms: 0.0,
            start_ms: 0.0,
            end_ms: latency_ms,
            queue_ms: 0.0,
            service_ms: latency_ms,
            latency_ms,
            bytes,
            cached_bytes: 0,
            pieces: 1,
            lane: 0,
            lag_ms: None,
            transfer_ms: latency_ms,
            mismatched_bytes: None,
            prefill_end_ms: None,
            after_prefill_ms: None,
            src: Some(src),
            dst: Some(dst),
            pool_wait_ms: None,
            blocks: None,
        }
    }

    #[test]
    fn links_and_ranks_each_add_up_to_the_load() {
        let records = [rec(0, 0, 2, 1000, 1.0), rec(1, 1, 2, 3000, 2.0), rec(2, 0, 3, 2000, 4.0)];
        let cl = ClusterReplayJson {
            prefill: vec![0, 1],
            decode: vec![2, 3],
            route: "least-loaded".into(),
            links: vec![[0, 2], [0, 3], [1, 2], [1, 3]],
        };
        let s = LoadClusterJson::of(&records, &cl.links, &cl, 1.0);
        let counts: Vec<u64> = s.links.iter().map(|l| l.summary.requests).collect();
        assert_eq!(counts, [1, 1, 1, 0]);
        let gbps: f64 = s.links.iter().filter_map(|l| l.summary.gbps).sum();
        assert!((gbps - 6000.0 / 1e9 / 1e-3).abs() < 1e-9, "{gbps}");
        let decode: Vec<(usize, u64)> =
            s.ranks.iter().filter(|r| r.role == "decode").map(|r| (r.rank, r.summary.bytes_moved)).collect();
        assert_eq!(decode, [(2, 4000), (3, 2000)]);
        assert_eq!(s.ranks.len(), 4);
        assert!(s.links[3].summary.latency_ms.is_none());
    }
}
