//! The `data` of server-sent events, as a Streamable HTTP response carries JSON-RPC
//! messages: fed bytes as they arrive, it yields each event's data once the blank line
//! that ends the event is in.

/// An incremental SSE reader (only `data:` fields matter here; `event:`, `id:`,
/// `retry:` and comments are read and dropped).
#[derive(Debug, Default)]
pub(crate) struct EventReader {
    pending: Vec<u8>,
    /// How much of `pending` holds no line end (a long line is searched once).
    scanned: usize,
    data: Vec<String>,
    /// The bytes of `data`.
    data_bytes: usize,
}

impl EventReader {
    /// How many bytes of an unfinished event are held: what a limit on one message
    /// bounds.
    pub(crate) fn buffered(&self) -> usize {
        self.pending.len() + self.data_bytes
    }

    /// Takes the next bytes; returns the data of every event they completed.
    pub(crate) fn feed(&mut self, bytes: &[u8]) -> Vec<String> {
        self.pending.extend_from_slice(bytes);
        let mut events = Vec::new();
        while let Some(end) = self.pending[self.scanned..].iter().position(|b| *b == b'\n').map(|i| i + self.scanned) {
            self.scanned = 0;
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line[..line.len() - 1]);
            let line = line.strip_suffix('\r').unwrap_or(&line);
            if line.is_empty() {
                if !self.data.is_empty() {
                    self.data_bytes = 0;
                    events.push(std::mem::take(&mut self.data).join("\n"));
                }
                continue;
            }
            if let Some(value) = line.strip_prefix("data") {
                // `data:value`, `data: value` (one leading space dropped) or a bare `data`.
                if value.is_empty() || value.starts_with(':') {
                    let value = value.strip_prefix(':').unwrap_or_default();
                    let value = value.strip_prefix(' ').unwrap_or(value);
                    self.data_bytes += value.len() + 1;
                    self.data.push(value.to_owned());
                }
            }
        }
        self.scanned = self.pending.len();
        events
    }

    /// The data of an event the stream ended in without its blank line.
    pub(crate) fn finish(&mut self) -> Option<String> {
        self.scanned = 0;
        self.data_bytes = 0;
        let tail = String::from_utf8_lossy(&std::mem::take(&mut self.pending)).into_owned();
        if let Some(value) = tail.strip_prefix("data:") {
            self.data.push(value.strip_prefix(' ').unwrap_or(value).trim_end_matches('\r').to_owned());
        }
        (!self.data.is_empty()).then(|| std::mem::take(&mut self.data).join("\n"))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    #[test]
    fn an_unfinished_event_counts_what_it_holds() {
        let mut reader = super::EventReader::default();
        assert!(reader.feed(b"data: 0123").is_empty());
        assert_eq!(reader.buffered(), 10);
        assert!(reader.feed(b"456789\ndata: more\n").is_empty());
        assert_eq!(reader.buffered(), 16, "the event's data so far: {reader:?}");
        assert_eq!(reader.feed(b"\n"), ["0123456789\nmore"]);
        assert_eq!(reader.buffered(), 0);
    }

    use super::EventReader;

    #[test]
    fn events_end_at_blank_lines_whatever_the_line_endings() {
        let mut reader = EventReader::default();
        let text = ": comment\r\nevent: message\r\ndata: {\"a\":1}\r\n\r\nid: 7\ndata:{\"b\"\ndata: :2}\n\n";
        assert_eq!(reader.feed(text.as_bytes()), ["{\"a\":1}", "{\"b\"\n:2}"]);
        assert_eq!(reader.feed(b"data: tail"), Vec::<String>::new());
        assert_eq!(reader.finish().as_deref(), Some("tail"));
        assert_eq!(reader.finish(), None);
    }

    #[test]
    fn fields_that_only_start_like_data_are_not_data() {
        let mut reader = EventReader::default();
        assert_eq!(reader.feed(b"database: x\ndata: y\n\n"), ["y"]);
    }

    proptest! {
        #[test]
        fn any_split_of_the_stream_reads_the_same_events(cut in 0usize..60) {
            let text = b"data: {\"jsonrpc\":\"2.0\"}\n\nevent: x\ndata: second\n\n";
            let cut = cut.min(text.len());
            let mut reader = EventReader::default();
            let mut events = reader.feed(&text[..cut]);
            events.extend(reader.feed(&text[cut..]));
            prop_assert_eq!(events, vec!["{\"jsonrpc\":\"2.0\"}".to_owned(), "second".to_owned()]);
        }
    }
}
