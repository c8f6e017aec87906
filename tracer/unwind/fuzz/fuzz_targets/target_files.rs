//! Any bytes a recorded program writes for idleflow to read, given to the
//! readers of each: a perf map (`/tmp/perf-PID.map`, the JIT's names), the
//! thread work area the JVM agents write while idleflow reads it, and an
//! agent's call-tree dump. An error, a refusal or wrong names, never a
//! panic, a hang or an allocation the input does not pay for. The first
//! byte chooses the reader.

#![no_main]

use std::io::Write;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&which, bytes)) = data.split_first() else {
        return;
    };
    match which % 3 {
        0 => {
            let map = idleflow_unwind::perfmap::PerfMap::parse(&String::from_utf8_lossy(bytes));
            for addr in [0, 1, 0x7f00_0000_0000, u64::MAX] {
                let _ = map.find(addr);
            }
            if let Some(w) = bytes.get(..8) {
                let _ = map.find(u64::from_le_bytes(w.try_into().unwrap()));
            }
        }
        1 => {
            let mut file = tempfile::tempfile().unwrap();
            file.write_all(bytes).unwrap();
            let Ok(area) =
                idleflow_wire::twa::WorkArea::from_file(&file, std::path::Path::new("fuzz"))
            else {
                return;
            };
            for (i, _, _) in area.claimed().take(64).collect::<Vec<_>>() {
                if let Some(slot) = area.slot(i) {
                    let now = slot.current().map_or(7, |(_, since)| since);
                    for t in [0, now, now.wrapping_add(1), u64::MAX] {
                        let _ = slot.node_at(t);
                    }
                    let _ = slot.counts();
                }
            }
        }
        _ => {
            let _ = idleflow_format::tree::decode_dump(bytes);
        }
    }
});
