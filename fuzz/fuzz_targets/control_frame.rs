//! The control channel's framing and message decoder, on bytes a stranger could send before authentication (the
//! pre-auth frame limit) and after it: no panic, no allocation past the frame limit, every decoded message named.
#![no_main]
use kvxfer::control::frame::{read_frame_limited, MAX_HELLO_FRAME};
use kvxfer::control::Msg;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut r = std::io::Cursor::new(data);
    while let Ok(body) = read_frame_limited(&mut r, MAX_HELLO_FRAME) {
        assert!(body.len() <= MAX_HELLO_FRAME);
        if let Ok(msg) = serde_json::from_slice::<Msg>(&body) {
            let _ = msg.name();
        } else if let Ok(text) = std::str::from_utf8(&body) {
            // What a log line would show of it: no control character survives (no forged lines, no terminal
            // escapes), and at most 200 of the peer's characters are kept (each escape is at most 10 long).
            let shown = kvxfer::console::printable(text);
            assert!(!shown.chars().any(|c| c.is_control()), "{shown:?}");
            assert!(shown.chars().count() <= 200 * 10 + 1);
        }
    }
});
