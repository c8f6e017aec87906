//! Any bytes given as a JVM's flight recording: waits, notes or an error,
//! never a panic, a hang or an allocation the input does not pay for.

#![no_main]

use idleflow_jfr::{convert_from, Options};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let opts = Options {
        pid: 1,
        offset_ns: 0,
        thresholds: idleflow_jfr::Thresholds::all(0),
        all_waits: Vec::new(),
        ephemeral_ports: (32768, 60999),
    };
    let _ = convert_from(
        std::io::Cursor::new(data),
        "fuzz",
        data.len() as u64,
        &opts,
        |_| Ok::<(), std::io::Error>(()),
    );
});
