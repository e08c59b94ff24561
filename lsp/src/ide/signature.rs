//! Signature help for builtin function calls: which call the cursor is in and which argument.
//!
//! Read from the text before the cursor (the call is usually unfinished while typing): the
//! nearest unclosed `(` preceded by a builtin's name, skipping strings and nested brackets.

use reel_eval::Builtin;

/// The builtin whose argument list holds `offset`, and the index of the argument.
pub fn call_at(text: &str, offset: usize) -> Option<(&'static Builtin, u32)> {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    // Scan forwards once so strings are skipped correctly, keeping a stack of open brackets and
    // the commas seen at each depth.
    let mut stack: Vec<(usize, char, u32)> = Vec::new();
    let mut in_string = false;
    let mut escaped = false;
    for (i, c) in before.char_indices() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '(' | '[' | '{' => stack.push((i, c, 0)),
            ')' | ']' | '}' => {
                stack.pop();
            }
            ',' => {
                if let Some(top) = stack.last_mut() {
                    top.2 += 1;
                }
            }
            _ => {}
        }
    }
    let &(open, bracket, commas) = stack.last()?;
    if bracket != '(' {
        return None;
    }
    let name: String = before[..open]
        .chars()
        .rev()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    Some((reel_eval::builtin(&name)?, commas))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_call_and_the_argument() {
        let text = "step t = join([\"a,b\", x], ";
        let (b, arg) = call_at(text, text.len()).unwrap();
        assert_eq!((b.name, arg), ("join", 1));
        assert!(call_at("len(x) + ", 9).is_none());
        assert!(call_at("nosuch(", 7).is_none());
    }
}
