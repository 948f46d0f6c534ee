//! Writes a replay step by step, holding neither its inputs nor its hash rows in memory.
//!
//! The `.ostm` layout puts the hash rows (one per step) before the inputs, and the step
//! count before both, so neither can be written until the session ends. The recorder
//! spools inputs and hashes to two sidecar files next to the target (`FILE.inputs.part`,
//! `FILE.hashes.part`) and assembles the replay when [`Recorder::finish`] is called:
//! written to `FILE.part`, then renamed over `FILE`, so a finished file is always whole.

use crate::link::Link;
use crate::ostm::{flags_for, write_header, MAX_STEPS};
use crate::world::{Setup, World};
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

/// A replay being recorded: start snapshot, then one input and one hash per step.
pub struct Recorder {
    path: PathBuf,
    setup: Setup,
    link: Option<Link>,
    start: Option<Vec<u8>>,
    steps: u32,
    inputs: BufWriter<File>,
    hashes: BufWriter<File>,
}

fn sidecar(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

impl Recorder {
    /// Starts a recording of a world as it is now. With `with_start_snapshot` the replay
    /// holds the world's snapshot (flag bit 1), else it must be at step 0 and the replay
    /// starts from the setup.
    pub fn create(path: &Path, world: &World, with_start_snapshot: bool) -> io::Result<Recorder> {
        if !with_start_snapshot
            && (world.step != 0 || *world != World::new(world.setup(), world.link()))
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a recording without a start snapshot must start from the setup's world at step 0",
            ));
        }
        let mut hashes = BufWriter::new(File::create(sidecar(path, ".hashes.part"))?);
        hashes.write_all(&world.hash().to_le_bytes())?;
        Ok(Recorder {
            path: path.to_path_buf(),
            setup: world.setup(),
            link: world.link(),
            start: with_start_snapshot.then(|| world.snapshot()),
            steps: 0,
            inputs: BufWriter::new(File::create(sidecar(path, ".inputs.part"))?),
            hashes,
        })
    }

    /// Steps recorded so far.
    pub fn steps(&self) -> u32 {
        self.steps
    }

    /// The file being written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Records one step: its input bytes and the world hash after it.
    pub fn push(&mut self, input: &[u8], hash_after: u64) -> io::Result<()> {
        if self.steps >= MAX_STEPS {
            return Err(io::Error::other("a replay holds at most 16 777 216 steps"));
        }
        let len = u16::try_from(input.len())
            .map_err(|_| io::Error::other("step input longer than 65535 bytes"))?;
        self.inputs.write_all(&len.to_le_bytes())?;
        self.inputs.write_all(input)?;
        self.hashes.write_all(&hash_after.to_le_bytes())?;
        self.steps += 1;
        Ok(())
    }

    /// Writes the whole replay and removes the sidecars; returns the step count.
    pub fn finish(mut self) -> io::Result<u32> {
        self.inputs.flush()?;
        self.hashes.flush()?;
        let flags = flags_for(true, self.start.is_some(), self.link.is_some());
        let mut head = Vec::new();
        write_header(&mut head, &self.setup, self.link, self.steps, flags);
        if let Some(s) = &self.start {
            head.extend_from_slice(&(s.len() as u32).to_le_bytes());
            head.extend_from_slice(s);
        }
        let part = sidecar(&self.path, ".part");
        let mut out = BufWriter::new(File::create(&part)?);
        out.write_all(&head)?;
        let hashes_path = sidecar(&self.path, ".hashes.part");
        let inputs_path = sidecar(&self.path, ".inputs.part");
        io::copy(&mut BufReader::new(File::open(&hashes_path)?), &mut out)?;
        io::copy(&mut BufReader::new(File::open(&inputs_path)?), &mut out)?;
        out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        std::fs::rename(&part, &self.path)?;
        let _ = std::fs::remove_file(hashes_path);
        let _ = std::fs::remove_file(inputs_path);
        Ok(self.steps)
    }
}
