//! The step graph: dependencies from references and `after`, and the cycles that make a flow unrunnable.

use std::collections::{BTreeMap, BTreeSet};

/// The dependency graph of one flow's steps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dag {
    /// Each cycle as the steps around it, in order (the last depends on the first).
    pub cycles: Vec<Vec<String>>,
    /// Every step that is part of a cycle.
    pub in_cycle: BTreeSet<String>,
}

/// Finds the cycles of a graph of `names.len()` steps, `adj[i]` the indices of the steps step
/// `i` depends on, each cycle reported once.
///
/// Tarjan's algorithm gives the strongly connected components; each one with more than one
/// step, or a step that depends on itself, is a cycle. The steps of a component are listed in
/// the order of one walk around it, from its first name in alphabetical order, so the message
/// can name each edge and does not depend on where the steps are written.
pub fn find_cycles(names: &[&str], adj: &[Vec<usize>]) -> Dag {
    let sccs = tarjan(adj);
    let mut dag = Dag::default();
    for scc in sccs {
        let self_loop = scc.len() == 1 && adj[scc[0]].contains(&scc[0]);
        if scc.len() < 2 && !self_loop {
            continue;
        }
        let members: BTreeSet<usize> = scc.iter().copied().collect();
        let start = *scc
            .iter()
            .min_by_key(|&&i| names[i])
            .expect("a component is never empty");
        let cycle = walk_cycle(adj, &members, start);
        for &i in &scc {
            dag.in_cycle.insert(names[i].to_string());
        }
        dag.cycles
            .push(cycle.into_iter().map(|i| names[i].to_string()).collect());
    }
    dag.cycles.sort();
    dag
}

/// One simple cycle through `start` inside a strongly connected component (breadth-first, so it is short).
fn walk_cycle(adj: &[Vec<usize>], members: &BTreeSet<usize>, start: usize) -> Vec<usize> {
    let mut prev: BTreeMap<usize, usize> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(n) = queue.pop_front() {
        for &m in &adj[n] {
            if !members.contains(&m) {
                continue;
            }
            if m == start {
                let mut path = vec![n];
                let mut cur = n;
                while cur != start {
                    cur = prev[&cur];
                    path.push(cur);
                }
                path.reverse();
                return path;
            }
            if let std::collections::btree_map::Entry::Vacant(e) = prev.entry(m) {
                e.insert(n);
                queue.push_back(m);
            }
        }
    }
    vec![start]
}

/// Iterative Tarjan: deep flows must not overflow the stack. Returns the components that are
/// cycles only (more than one step, or one that reads itself).
fn tarjan(adj: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let n = adj.len();
    let mut index = vec![usize::MAX; n];
    let mut low = vec![0; n];
    let mut on_stack = vec![false; n];
    let mut stack = Vec::new();
    let mut next = 0;
    let mut out = Vec::new();
    for root in 0..n {
        if index[root] != usize::MAX {
            continue;
        }
        let mut work: Vec<(usize, usize)> = vec![(root, 0)];
        while let Some(&mut (v, ref mut child)) = work.last_mut() {
            if *child == 0 {
                index[v] = next;
                low[v] = next;
                next += 1;
                stack.push(v);
                on_stack[v] = true;
            }
            if *child < adj[v].len() {
                let w = adj[v][*child];
                *child += 1;
                if index[w] == usize::MAX {
                    work.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            work.pop();
            if let Some(&(parent, _)) = work.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == index[v] {
                // A step alone in its component and not reading itself is no cycle: most are
                // that, so they are popped without a list of their own.
                if stack.last() == Some(&v) && !adj[v].contains(&v) {
                    stack.pop();
                    on_stack[v] = false;
                    continue;
                }
                let mut scc = Vec::new();
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    scc.push(w);
                    if w == v {
                        break;
                    }
                }
                out.push(scc);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The graph of `edges` (a step and the steps it depends on) as names and indices.
    fn cycles(edges: &[(&str, &[&str])]) -> Dag {
        let names: Vec<&str> = edges.iter().map(|(n, _)| *n).collect();
        let adj: Vec<Vec<usize>> = edges
            .iter()
            .map(|(_, ds)| {
                ds.iter()
                    .filter_map(|d| names.iter().position(|n| n == d))
                    .collect()
            })
            .collect();
        find_cycles(&names, &adj)
    }

    #[test]
    fn finds_each_cycle_once_in_walk_order() {
        let dag = cycles(&[
            ("d", &["a"]),
            ("c", &["a"]),
            ("b", &["c"]),
            ("a", &["b"]),
            ("e", &["e"]),
        ]);
        assert_eq!(dag.cycles, vec![vec!["a", "b", "c"], vec!["e"]]);
        assert!(!dag.in_cycle.contains("d"));
    }

    #[test]
    fn a_long_chain_does_not_overflow() {
        let names: Vec<String> = (0..100_000).map(|i| format!("s{i}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let adj: Vec<Vec<usize>> = (0..names.len())
            .map(|i| {
                if i + 1 < names.len() {
                    vec![i + 1]
                } else {
                    vec![]
                }
            })
            .collect();
        assert!(find_cycles(&names, &adj).cycles.is_empty());
    }
}
