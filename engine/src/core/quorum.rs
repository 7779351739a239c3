//! Quorum arithmetic, pure and table-tested.

/// Votes or acknowledgements needed among `nodes` replicas.
pub fn majority(nodes: usize) -> usize {
    nodes / 2 + 1
}

/// The highest index that a majority of replicas hold, given each replica's durable match
/// index (the leader's own included); as well the highest read round a majority answered.
pub fn quorum_index<T: Ord + Copy>(matched: &mut [T]) -> T {
    assert!(!matched.is_empty(), "a cluster has at least one replica");
    matched.sort_unstable_by(|a, b| b.cmp(a));
    let quorum = matched[majority(matched.len()) - 1];
    // A walk of the replicas, for every commit: debug builds only.
    debug_assert!(
        matched.iter().filter(|&&m| m >= quorum).count() >= majority(matched.len()),
        "the quorum index is held by fewer than a majority"
    );
    quorum
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::EntryIndex;

    /// Proves the quorum index over a table of cases: the value a majority has reached.
    #[test]
    fn quorum_index_table() {
        let cases: &[(&[u64], u64)] = &[
            (&[5], 5),
            (&[5, 3, 1], 3),
            (&[1, 3, 5], 3),
            (&[7, 7, 0], 7),
            (&[0, 0, 9], 0),
            (&[4, 4, 4], 4),
            (&[9, 2, 6, 4, 8], 6),
            (&[1, 2], 1),
        ];
        for (matched, expected) in cases {
            let mut v: Vec<EntryIndex> = matched.iter().map(|&m| EntryIndex(m)).collect();
            assert_eq!(quorum_index(&mut v), EntryIndex(*expected), "{matched:?}");
        }
        assert_eq!([1, 2, 3, 4, 5].map(majority), [1, 2, 2, 3, 3]);
    }
}
