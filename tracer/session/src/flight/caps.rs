//! The caps on a flight recorder's dumps: whether a dump decided on now is
//! held back (`--max-dumps`, `--max-per-hour`, and for the triggers' own
//! conditions `--cooldown`), and which of its dumps go once a new one is
//! written (`--keep-files`, `--keep-bytes`: the oldest first, never the
//! newest; one longer than the spare becomes it).

use std::time::{Duration, Instant};

use super::{FlightOptions, State};
use crate::Progress;

/// An hour, for `--max-per-hour`.
pub(super) const HOUR: Duration = Duration::from_secs(3600);

impl State {
    /// Why a dump decided on now would be held back, and whether that is a
    /// cap (said once) rather than the cooldown; None: it would not.
    pub(super) fn held_back(&self, flight: &FlightOptions, asked: bool) -> Option<(String, bool)> {
        let last_hour: Vec<&Instant> = self
            .decided_at
            .iter()
            .filter(|t| t.elapsed() < HOUR)
            .collect();
        if self.decided >= flight.max_dumps {
            return Some((
                format!("--max-dumps {} is reached: no more dumps", flight.max_dumps),
                true,
            ));
        }
        if flight.max_per_hour > 0 && last_hour.len() >= flight.max_per_hour as usize {
            let next = last_hour
                .first()
                .map_or(HOUR, |t| HOUR.saturating_sub(t.elapsed()));
            return Some((
                format!(
                    "--max-per-hour {} is reached: the next dump in {:.0} min at the earliest",
                    flight.max_per_hour,
                    next.as_secs_f64() / 60.0
                ),
                true,
            ));
        }
        if !asked
            && self
                .last_decided
                .is_some_and(|t| t.elapsed() < flight.cooldown)
        {
            return Some((
                format!(
                    "cooling down (--cooldown {:.0} s)",
                    flight.cooldown.as_secs_f64()
                ),
                false,
            ));
        }
        None
    }

    /// Removes this recorder's oldest dumps beyond `--keep-files` and
    /// `--keep-bytes` (dumps still being written are not there yet).
    pub(super) fn prune(&mut self, flight: &FlightOptions, progress: &mut dyn Progress) {
        if flight.keep_files == 0 && flight.keep_bytes == 0 {
            return;
        }
        let on_disk: Vec<(usize, u64)> = self
            .flown
            .dumps
            .iter()
            .enumerate()
            .filter_map(|(i, p)| std::fs::metadata(p).ok().map(|m| (i, m.len())))
            .collect();
        let sizes: Vec<u64> = on_disk.iter().map(|&(_, b)| b).collect();
        for k in beyond_caps(&sizes, flight.keep_files, flight.keep_bytes) {
            let path = &self.flown.dumps[on_disk[k].0];
            // Its pages are in memory: the next dump may write over them.
            let name = path.file_name().unwrap_or_default();
            let gone = if self.spare.recycle(name) {
                Ok(())
            } else {
                self.dir.remove(name)
            };
            match gone {
                Ok(()) => {
                    self.flown.removed += 1;
                    progress.info(&format!(
                        "flight: removed the oldest dump {} ({})",
                        path.display(),
                        if flight.keep_files > 0 && on_disk.len() > flight.keep_files as usize {
                            format!("--keep-files {}", flight.keep_files)
                        } else {
                            format!("--keep-bytes {}", flight.keep_bytes)
                        }
                    ));
                }
                Err(e) => progress.note(&format!(
                    "flight: cannot remove the old dump {}: {e}",
                    path.display()
                )),
            }
        }
    }
}

/// Which of the dumps of `sizes` (bytes, oldest first) go so that at most
/// `keep_files` (0: any number) stay, together at most `keep_bytes` (0: any
/// size): the oldest, never the newest. Indexes into `sizes`, oldest first.
fn beyond_caps(sizes: &[u64], keep_files: u32, keep_bytes: u64) -> Vec<usize> {
    let mut kept = 0u64;
    let mut stay = 0usize;
    for (n, &b) in sizes.iter().rev().enumerate() {
        let over_files = keep_files > 0 && n >= keep_files as usize;
        let over_bytes = keep_bytes > 0 && n > 0 && kept.saturating_add(b) > keep_bytes;
        if over_files || over_bytes {
            break;
        }
        kept = kept.saturating_add(b);
        stay += 1;
    }
    (0..sizes.len() - stay).collect()
}

#[cfg(test)]
mod tests {
    use super::beyond_caps;

    #[test]
    fn the_oldest_dumps_go_beyond_the_caps_and_the_newest_stays() {
        // Oldest first: 10, 20, 30, 40 bytes.
        let sizes = [10, 20, 30, 40];
        assert_eq!(beyond_caps(&sizes, 0, 0), Vec::<usize>::new());
        assert_eq!(beyond_caps(&sizes, 2, 0), vec![0, 1]);
        assert_eq!(beyond_caps(&sizes, 9, 0), Vec::<usize>::new());
        // 40 + 30 = 70 fit in 75; 20 more would not.
        assert_eq!(beyond_caps(&sizes, 0, 75), vec![0, 1]);
        assert_eq!(beyond_caps(&sizes, 0, 100), Vec::<usize>::new());
        // The newest stays even when it alone is over the bytes.
        assert_eq!(beyond_caps(&sizes, 0, 5), vec![0, 1, 2]);
        // Both caps: the tighter one decides.
        assert_eq!(beyond_caps(&sizes, 3, 75), vec![0, 1]);
        assert_eq!(beyond_caps(&sizes, 1, 1000), vec![0, 1, 2]);
        assert_eq!(beyond_caps(&[], 1, 1), Vec::<usize>::new());
    }
}
