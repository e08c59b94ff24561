//! LSP's base protocol (Content-Length framing) from the client's side, for the programs that
//! drive `reel lsp` as an editor does: the end-to-end tests and the latency benchmark.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::sync::mpsc::{Receiver, channel};

use serde_json::Value;

/// Reads one framed message; `None` at the end of the stream or on a malformed frame.
pub fn read_message(reader: &mut impl BufRead) -> Option<Value> {
    serde_json::from_slice(&read_frame(reader)?).ok()
}

/// Reads one frame's body, not parsed (a benchmark stamps its arrival before parsing it);
/// `None` at the end of the stream or on a malformed frame.
pub fn read_frame(reader: &mut impl BufRead) -> Option<Vec<u8>> {
    let mut length = None;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some(v) = line.strip_prefix("Content-Length:") {
            length = v.trim().parse::<usize>().ok();
        }
    }
    let mut body = vec![0; length?];
    reader.read_exact(&mut body).ok()?;
    Some(body)
}

/// The messages read from `stream` (a server's stdout) on a thread of their own, so that a
/// driver can wait for one with a timeout; the channel closes at the end of the stream.
pub fn incoming(stream: impl Read + Send + 'static) -> Receiver<Value> {
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stream);
        while let Some(message) = read_message(&mut reader) {
            if tx.send(message).is_err() {
                break;
            }
        }
    });
    rx
}

/// Writes one message with its frame and flushes it.
pub fn write_message(writer: &mut impl Write, message: &Value) -> io::Result<()> {
    let body = message.to_string();
    write!(writer, "Content-Length: {}\r\n\r\n{body}", body.len())?;
    writer.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_message_reads_back_and_a_cut_one_does_not() {
        let message = serde_json::json!({ "jsonrpc": "2.0", "id": 1, "result": "é" });
        let mut framed = Vec::new();
        write_message(&mut framed, &message).unwrap();
        assert_eq!(read_message(&mut &framed[..]), Some(message));
        assert_eq!(read_message(&mut &framed[..framed.len() - 1]), None);
    }
}
