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

/// Finds the cycles of `edges` (step → the steps it depends on), each reported once.
///
/// Tarjan's algorithm gives the strongly connected components; each one with more than one
/// step, or a step that depends on itself, is a cycle. The steps of a component are listed in
/// the order of one walk around it, so the message can name each edge.
pub fn find_cycles(edges: &BTreeMap<String, Vec<String>>) -> Dag {
    let names: Vec<&String> = edges.keys().collect();
    let index_of: BTreeMap<&str, usize> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), i))
        .collect();
    let adj: Vec<Vec<usize>> = names
        .iter()
        .map(|n| {
            edges[*n]
                .iter()
                .filter_map(|d| index_of.get(d.as_str()).copied())
                .collect()
        })
        .collect();
    let sccs = tarjan(&adj);
    let mut dag = Dag::default();
    for scc in sccs {
        let self_loop = scc.len() == 1 && adj[scc[0]].contains(&scc[0]);
        if scc.len() < 2 && !self_loop {
            continue;
        }
        let members: BTreeSet<usize> = scc.iter().copied().collect();
        let start = *members.iter().next().expect("a component is never empty");
        let cycle = walk_cycle(&adj, &members, start);
        for &i in &scc {
            dag.in_cycle.insert(names[i].clone());
        }
        dag.cycles
            .push(cycle.into_iter().map(|i| names[i].clone()).collect());
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

/// Iterative Tarjan: deep flows must not overflow the stack.
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

    fn graph(edges: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
        edges
            .iter()
            .map(|(n, ds)| (n.to_string(), ds.iter().map(|d| d.to_string()).collect()))
            .collect()
    }

    #[test]
    fn finds_each_cycle_once_in_walk_order() {
        let g = graph(&[
            ("a", &["b"]),
            ("b", &["c"]),
            ("c", &["a"]),
            ("d", &["a"]),
            ("e", &["e"]),
        ]);
        let dag = find_cycles(&g);
        assert_eq!(dag.cycles, vec![vec!["a", "b", "c"], vec!["e"]]);
        assert!(!dag.in_cycle.contains("d"));
    }

    #[test]
    fn a_long_chain_does_not_overflow() {
        let names: Vec<String> = (0..100_000).map(|i| format!("s{i}")).collect();
        let mut g = BTreeMap::new();
        for i in 0..names.len() {
            let deps = if i + 1 < names.len() {
                vec![names[i + 1].clone()]
            } else {
                vec![]
            };
            g.insert(names[i].clone(), deps);
        }
        assert!(find_cycles(&g).cycles.is_empty());
    }
}
