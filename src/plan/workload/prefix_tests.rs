use super::*;
use crate::error::exit_code;
use crate::plan::workload::shipped_trace as shipped;

fn req(input: u64, ids: &[u64]) -> Request {
    Request { id: 0, arrival_ms: 0.0, input_tokens: input, output_tokens: 1, hash_ids: Some(ids.to_vec()) }
}

/// Worked by hand, the cache's contents after each request listed least recent first.
fn example() -> Vec<Request> {
    vec![
        req(1024, &[1, 2]),    // miss; [1 2]
        req(1100, &[1, 2, 3]), // 1 and 2 lead: 1024 cached; [1 2 3]
        req(600, &[4, 5]),     // miss; capacity 3: [3 4 5]
        req(1024, &[1, 2]),    // 1 was evicted: miss; [5 1 2]
        req(300, &[5]),        // one block, capped at the 300-token input; [1 2 5]
        req(1536, &[1, 9, 2]), // 1 leads, 9 breaks the run: 512 (2 is cached but after the gap); [1 9 2]
    ]
}

fn run(size: PrefixCacheSize, reqs: &[Request]) -> (Vec<u64>, PrefixHits) {
    let mut c = PrefixCache::new(size);
    let cached = reqs.iter().map(|r| c.admit(r)).collect();
    (cached, c.hits())
}

#[test]
fn a_small_cache_counts_only_the_leading_run_and_evicts_the_least_recent() {
    let (cached, hits) = run(PrefixCacheSize::Blocks(3), &example());
    assert_eq!(cached, [0, 1024, 0, 0, 300, 512]);
    assert_eq!(hits, PrefixHits { requests: 6, hit_requests: 3, cached_tokens: 1836, input_tokens: 5584 });
    assert!((hits.rate() - 1836.0 / 5584.0).abs() < 1e-12);
}

#[test]
fn an_unlimited_cache_keeps_every_block_and_off_keeps_none() {
    let (cached, hits) = run(PrefixCacheSize::Unlimited, &example());
    assert_eq!(cached, [0, 1024, 0, 1024, 300, 512]);
    assert_eq!((hits.hit_requests, hits.cached_tokens), (4, 2860));
    let (cached, hits) = run(PrefixCacheSize::Off, &example());
    assert_eq!(cached, [0; 6]);
    assert_eq!(hits, PrefixHits { requests: 6, hit_requests: 0, cached_tokens: 0, input_tokens: 5584 });
    assert_eq!(hits.rate(), 0.0);
}

#[test]
fn a_request_without_hash_ids_finds_and_adds_nothing() {
    let mut c = PrefixCache::new(PrefixCacheSize::Unlimited);
    c.admit(&req(1024, &[1, 2]));
    let bare = Request { hash_ids: None, ..req(1024, &[]) };
    assert_eq!(c.admit(&bare), 0);
    assert_eq!(c.blocks(), 2);
}

#[test]
fn sizes_read_off_unlimited_or_blocks() {
    assert_eq!("off".parse::<PrefixCacheSize>().unwrap(), PrefixCacheSize::Off);
    assert_eq!("unlimited".parse::<PrefixCacheSize>().unwrap(), PrefixCacheSize::Unlimited);
    assert_eq!("4096".parse::<PrefixCacheSize>().unwrap(), PrefixCacheSize::Blocks(4096));
    for (bad, says) in [("0", "write off"), ("lots", "expected off, unlimited or a number"), ("-1", "expected")] {
        let e = bad.parse::<PrefixCacheSize>().unwrap_err();
        assert_eq!(exit_code(&e), 2);
        assert!(e.to_string().contains(says), "{bad}: {e}");
    }
}

/// The rule written as plainly as possible: with a capacity, a Vec of ids least recent first, scanned for every
/// lookup; unlimited, a flag per id (order cannot matter when nothing leaves).
fn naive(reqs: &[Request], cap: Option<usize>) -> (u64, u64) {
    let (mut lru, mut seen, mut hits, mut cached_total) = (Vec::<u64>::new(), Vec::<bool>::new(), 0, 0);
    for r in reqs {
        let ids = r.hash_ids.as_ref().unwrap();
        let mut run = 0;
        while run < ids.len() {
            let id = ids[run];
            let present = if cap.is_some() { lru.contains(&id) } else { seen.get(id as usize) == Some(&true) };
            if !present {
                break;
            }
            run += 1;
        }
        let cached = (run as u64 * 512).min(r.input_tokens);
        hits += u64::from(cached > 0);
        cached_total += cached;
        for &id in ids {
            if cap.is_none() {
                seen.resize(seen.len().max(id as usize + 1), false);
                seen[id as usize] = true;
                continue;
            }
            if let Some(p) = lru.iter().position(|&x| x == id) {
                lru.remove(p);
            }
            lru.push(id);
        }
        if let Some(cap) = cap {
            let over = lru.len().saturating_sub(cap);
            lru.drain(..over);
        }
    }
    (hits, cached_total)
}

#[test]
fn the_shipped_trace_gives_what_a_naive_lru_gives() {
    let reqs = shipped();
    for (size, cap) in [(PrefixCacheSize::Blocks(600), Some(600)), (PrefixCacheSize::Unlimited, None)] {
        let (_, hits) = run(size, &reqs);
        assert_eq!((hits.hit_requests, hits.cached_tokens), naive(&reqs, cap), "{size:?}");
        assert!(hits.hit_requests > 0 && hits.cached_tokens > 0, "{size:?}: {hits:?}");
    }
}

/// The numbers a third implementation (Python's OrderedDict, outside the repository) gives for the shipped trace:
/// 600 blocks save 5.2% of prompt tokens, an unlimited cache 65.1%.
#[test]
fn the_shipped_trace_hits_more_with_more_cache() {
    let reqs = shipped();
    let hits = |s| run(s, &reqs).1;
    let (off, small, all) =
        (hits(PrefixCacheSize::Off), hits(PrefixCacheSize::Blocks(600)), hits(PrefixCacheSize::Unlimited));
    assert_eq!((off.hit_requests, off.cached_tokens, off.input_tokens), (0, 0, 61_194_628));
    assert_eq!((small.hit_requests, small.cached_tokens), (160, 3_170_189));
    assert_eq!((all.hit_requests, all.cached_tokens), (1782, 39_852_661));
    assert!((all.rate() - 0.6512).abs() < 1e-4, "{}", all.rate());
}
