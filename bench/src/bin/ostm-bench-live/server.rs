//! Starting and stopping the server a case measures: it prints `listening on ADDR` first;
//! one that does not is stopped, and what it said on stderr is the reason given.

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Bytes of a server's stderr kept for an error (the last ones).
const STDERR_KEPT: usize = 4096;

/// A started server: the process and the address it printed first.
pub struct Server {
    pub child: Child,
    pub addr: String,
}

/// Starts `cmd` (`what` names it in errors) and waits for the address its first line ends
/// with. Its output is read as it runs, so it never blocks on a full pipe.
///
/// # Errors
/// It cannot be started, or it ends or prints no address first: then with the end of
/// what it wrote on stderr.
pub fn start(mut cmd: Command, what: &str) -> Result<Server, String> {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {what}: {e}"))?;
    let err_text = Arc::new(Mutex::new(Vec::<u8>::new()));
    let drained = child.stderr.take().map(|mut e| {
        let kept = err_text.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = e.read(&mut buf) {
                let mut k = kept.lock().unwrap_or_else(|p| p.into_inner());
                k.extend_from_slice(&buf[..n]);
                let over = k.len().saturating_sub(STDERR_KEPT);
                k.drain(..over);
            }
        })
    });
    let Some(out) = child.stdout.take() else {
        return Err(format!(
            "{what}: no standard output to read its address from"
        ));
    };
    let mut lines = BufReader::new(out).lines();
    let first = lines.next().and_then(Result::ok).unwrap_or_default();
    let addr = first.rsplit(' ').next().unwrap_or_default().to_string();
    if addr.parse::<SocketAddr>().is_err() {
        let _ = child.kill();
        let status = child
            .wait()
            .map_or_else(|e| e.to_string(), |s| s.to_string());
        if let Some(t) = drained {
            let _ = t.join();
        }
        let said = String::from_utf8_lossy(&err_text.lock().unwrap_or_else(|p| p.into_inner()))
            .trim()
            .to_string();
        let said = if said.is_empty() {
            format!("its first line was {first:?}")
        } else {
            format!("it said: {said}")
        };
        return Err(format!("{what} did not start listening ({status}); {said}"));
    }
    std::thread::spawn(move || for _ in lines.map_while(Result::ok) {});
    Ok(Server { child, addr })
}

/// Stops the server with `signal` (`-INT` lets a host end its stream; `-KILL` for the
/// plain loop), waiting up to 10 s before killing it.
pub fn stop(mut s: Server, signal: &str) {
    let pid = s.child.id().to_string();
    let _ = Command::new("kill").args([signal, &pid]).status();
    for _ in 0..200 {
        if matches!(s.child.try_wait(), Ok(Some(_))) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = s.child.kill();
    let _ = s.child.wait();
}
