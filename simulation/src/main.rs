//! `ostm-simulate`: runs the deterministic simulation of whole live sessions for many
//! seeds, or one seed with its trace (docs/reliability.md).

use clap::Parser;
use ostm_protocol::reader::nats::Plant as NatsPlant;
use ostm_protocol::reader::tcp::Plant as ReaderPlant;
use ostm_protocol::serve::publish::Plant as PublishPlant;
use ostm_protocol::session::Plant;
use ostm_simulation::{run, run_pair, Config};
use std::process::ExitCode;
use std::time::Instant;

/// A deterministic simulation of whole live sessions: a host, viewers over TCP and NATS,
/// faults chosen by the seed, invariants checked all along; and for each seed a pair
/// session, the host's real connection machine against the real verifier. Each runs
/// twice and must give the same trace (the determinism check).
#[derive(Parser, Debug)]
#[command(
    name = "ostm-simulate",
    after_help = "Examples:
  ostm-simulate --seeds 2000                 # seeds 0..2000: one line per failure, then 'N passed, M failed'
  ostm-simulate --seed 17 --trace            # replay seed 17 and print its events
  ostm-simulate --list-plants                # the faults that can be planted
  ostm-simulate --plant skip-gap-check --seeds 2000   # must fail: the simulation catches it
  ostm-simulate --liveness --seeds 500       # faults stop two thirds of the way; all verify again

Exit codes: 0 every seed passed, 1 a seed failed (with --plant: the plant was caught),
2 bad arguments or the determinism check failed."
)]
struct Args {
    /// Run this many seeds, from --start.
    #[arg(long, default_value_t = 100, conflicts_with = "seed")]
    seeds: u64,
    /// The first seed of --seeds.
    #[arg(long, default_value_t = 0)]
    start: u64,
    /// Run only this seed.
    #[arg(long)]
    seed: Option<u64>,
    /// Print every event of the run (with --seed).
    #[arg(long, requires = "seed")]
    trace: bool,
    /// Plant a fault (see --list-plants).
    #[arg(long, value_name = "NAME")]
    plant: Option<String>,
    /// List the faults that can be planted, one a line.
    #[arg(long)]
    list_plants: bool,
    /// Faults stop two thirds of the way through each run; every viewer must then verify
    /// again up to the host's last step.
    #[arg(long)]
    liveness: bool,
    /// Stop at the first seed that fails (to show a planted fault is caught, quickly).
    #[arg(long)]
    first_failure: bool,
}

/// Where the recordings go: a folder of its own in memory where the machine has one
/// (`/dev/shm`: a sync costs nothing there), else in the temporary directory.
fn scratch_dir() -> std::path::PathBuf {
    let shm = std::path::Path::new("/dev/shm");
    let base = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    base.join(format!("ostm-simulate-{}", std::process::id()))
}

/// The plants of the recorder, beside the verifier's.
const RECOVER_UNVERIFIED: &str = "recover-unverified";
const RENAME_BEFORE_SYNC: &str = "rename-before-sync";

fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    if args.list_plants {
        for (_, name) in Plant::ALL {
            println!("{name}");
        }
        for (_, name) in ReaderPlant::ALL {
            println!("{name}");
        }
        for (_, name) in NatsPlant::ALL {
            println!("{name}");
        }
        for (_, name) in PublishPlant::ALL {
            println!("{name}");
        }
        println!("{RECOVER_UNVERIFIED}");
        println!("{RENAME_BEFORE_SYNC}");
        return ExitCode::SUCCESS;
    }
    let mut cfg = Config {
        liveness: args.liveness,
        trace: args.trace,
        scratch: scratch_dir(),
        ..Config::default()
    };
    if let Some(name) = &args.plant {
        if name == RECOVER_UNVERIFIED {
            cfg.plant_recover_unverified = true;
        } else if name == RENAME_BEFORE_SYNC {
            cfg.plant_rename_before_sync = true;
            ostm_protocol::format::recording::journal::plant_rename_before_sync();
        } else if let Some((p, _)) = Plant::ALL.iter().find(|(_, n)| n == name) {
            cfg.plant = Some(*p);
        } else if let Some((p, _)) = ReaderPlant::ALL.iter().find(|(_, n)| n == name) {
            cfg.reader_plant = Some(*p);
        } else if let Some((p, _)) = NatsPlant::ALL.iter().find(|(_, n)| n == name) {
            cfg.nats_plant = Some(*p);
        } else if let Some((p, _)) = PublishPlant::ALL.iter().find(|(_, n)| n == name) {
            cfg.publish_plant = Some(*p);
        } else {
            eprintln!(
                "ostm-simulate: --plant {name}: no such plant; `ostm-simulate --list-plants` names them"
            );
            return ExitCode::from(2);
        }
    }
    let seeds: Vec<u64> = match args.seed {
        Some(s) => vec![s],
        None => (args.start..args.start.saturating_add(args.seeds)).collect(),
    };
    let started = Instant::now();
    let (mut passed, mut failed, mut nondeterministic) = (0u64, 0u64, 0u64);
    let (mut steps, mut faults, mut verified) = (0u64, 0u64, 0u64);
    let mut first_caught = None;
    for &seed in &seeds {
        let a = run(seed, &cfg);
        // The determinism check: the same seed again gives the same events.
        let b = run(seed, &cfg);
        // The seed's pair session: the host's real connection against the verifier.
        let pa = run_pair(seed, &cfg);
        let pb = run_pair(seed, &cfg);
        if a.digest != b.digest
            || a.violation != b.violation
            || pa.digest != pb.digest
            || pa.violation != pb.violation
        {
            nondeterministic += 1;
            println!("seed {seed}: not deterministic: two runs gave different events");
        }
        if args.trace {
            print!("{}", a.trace);
            print!("{}", pa.trace);
        }
        steps += a.steps + pa.steps;
        faults += u64::from(a.faults);
        verified += a.verified + pa.verified;
        let violation = a
            .violation
            .or_else(|| pa.violation.map(|v| format!("pair session: {v}")));
        match violation {
            None => passed += 1,
            Some(v) => {
                failed += 1;
                first_caught.get_or_insert(seed);
                println!("seed {seed}: {v}");
                if args.first_failure {
                    break;
                }
            }
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let ran = passed + failed;
    let n = ran.max(1) as f64;
    eprintln!(
        "{ran} seeds in {secs:.1} s ({:.0} seeds/s, each run twice); per seed: {:.0} host steps, {:.1} faults, {:.0} steps verified",
        ran as f64 / secs.max(1e-9),
        steps as f64 / n,
        faults as f64 / n,
        verified as f64 / n
    );
    println!("{passed} passed, {failed} failed");
    let _ = std::fs::remove_dir_all(&cfg.scratch);
    if nondeterministic > 0 {
        return ExitCode::from(2);
    }
    if cfg.plant.is_some()
        || cfg.reader_plant.is_some()
        || cfg.nats_plant.is_some()
        || cfg.publish_plant.is_some()
        || cfg.plant_recover_unverified
        || cfg.plant_rename_before_sync
    {
        match first_caught {
            Some(seed) => println!("the planted fault was caught, first by seed {seed}"),
            None => println!("the planted fault was NOT caught: the simulation has a hole"),
        }
    }
    if failed > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
