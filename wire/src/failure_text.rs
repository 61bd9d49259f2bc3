//! Failure texts cut to what a status update carries: a task's error can be as long as
//! its function makes it, and the driver logs and keeps what it is sent.

/// The longest failure or kill text a status update carries (less under a small
/// `rpc.message.maxSize`): executors cut theirs to it, and the driver cuts what it is
/// sent to it too.
pub const MAX_FAILURE_TEXT: usize = 64 * 1024;

/// The most bytes of a [`Message::Refused`](crate::Message::Refused) reason. Small
/// enough that the frame fits within what a peer takes before authentication (512 bytes
/// of payload), since a refusal often comes during the handshake.
pub const MAX_REFUSAL_TEXT: usize = 320;

/// `text`, cut to at most `limit` bytes (on a character boundary) with a note of how
/// much went; copies only the part kept. Under a limit shorter than the note, the note
/// alone.
///
/// ```
/// let cut = flint_wire::cut_text(&"x".repeat(100), 40);
/// assert_eq!(cut, format!("{} ... (80 bytes cut)", "x".repeat(20)));
/// ```
pub fn cut_text(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_owned();
    }
    // The note for the whole length is at least as long as the final one.
    let longest_note = format!(" ... ({} bytes cut)", text.len());
    let mut end = limit.saturating_sub(longest_note.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{} ... ({} bytes cut)", &text[..end], text.len() - end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_is_cut_on_a_character_boundary_to_its_limit() {
        assert_eq!(cut_text("short", 5), "short");
        let long = "é".repeat(1000);
        for limit in [30, 31, 64, 1999] {
            let cut = cut_text(&long, limit);
            assert!(cut.len() <= limit, "{limit}: {} bytes", cut.len());
            assert!(cut.ends_with(" bytes cut)"), "{cut}");
            let kept = cut.split(" ... (").next().unwrap();
            let gone: usize = cut[kept.len() + 6..]
                .split(' ')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            assert_eq!(kept.len() + gone, long.len());
        }
        // A limit below the note's own length keeps nothing but the note.
        assert_eq!(cut_text(&long, 3), " ... (2000 bytes cut)");
    }
}
