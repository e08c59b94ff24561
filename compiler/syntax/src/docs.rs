//! Attaches `///` doc comments to the declaration, input or step right below them.

use crate::ast::{Comment, File, Item, Member};

/// The run of `///` lines that ends on the line just above `start`, joined by line breaks.
pub(crate) fn doc_before(src: &str, comments: &[Comment], start: u32) -> Option<String> {
    let idx = comments.partition_point(|c| c.span.start < start);
    let mut lines = Vec::new();
    let mut next = start as usize;
    for c in comments[..idx].iter().rev() {
        let gap = src.get(c.span.end as usize..next).unwrap_or("x");
        let adjacent = gap.chars().all(char::is_whitespace) && gap.matches('\n').count() == 1;
        if !c.doc || !adjacent {
            break;
        }
        lines.push(c.text.clone());
        next = c.span.start as usize;
    }
    if lines.is_empty() {
        return None;
    }
    lines.reverse();
    Some(lines.join("\n"))
}

/// Fills the `doc` fields of flows, tools, inputs, secrets, env names and steps.
pub(crate) fn attach_doc_comments(file: &mut File, src: &str) {
    let comments = &file.comments;
    for item in &mut file.items {
        match item {
            Item::Flow(flow) => {
                flow.doc = doc_before(src, comments, flow.span.start);
                attach_member_docs(&mut flow.members, comments, src);
            }
            Item::Tool(tool) => tool.doc = doc_before(src, comments, tool.span.start),
        }
    }
}

/// Fills the `doc` fields of a flow's members from `comments` (every comment of `src`, in order).
pub(crate) fn attach_member_docs(members: &mut [Member], comments: &[Comment], src: &str) {
    for member in members {
        let doc = doc_before(src, comments, member.span().start);
        match member {
            Member::Input(i) => i.doc = doc,
            Member::Secret(n) | Member::Env(n) => n.doc = doc,
            Member::Step(s) => s.doc = doc,
            Member::Output(_) | Member::Error(_) => {}
        }
    }
}
