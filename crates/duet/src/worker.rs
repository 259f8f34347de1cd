//! The driver's side of a worker: a [`Worker`] answers [`Request`]s; [`Process`] is one
//! running as a child process, spoken to over its stdin and stdout.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use crate::protocol::{Reply, Request, WORKER_FLAG};

/// Why a worker did not answer: it died, or it answered nonsense. A worker's own
/// `{"reply":"error"}` is not this: it is a [`Reply::Error`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WorkerError {
    #[error("could not start {what}: {why}")]
    Start { what: String, why: String },
    #[error("{what} exited ({why})")]
    Died { what: String, why: String },
    #[error("{what}: {why}")]
    Garbled { what: String, why: String },
}

/// Something that answers the protocol's requests.
pub trait Worker {
    /// Send one request and wait for its reply.
    fn call(&mut self, req: &Request) -> Result<Reply, WorkerError>;
    /// A short name for messages (`base linear #2`).
    fn label(&self) -> String;
}

/// How to start a worker process: an executable, its arguments and the variables that
/// differ from the driver's environment.
#[derive(Debug, Clone, PartialEq)]
pub struct Spawn {
    pub exe: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// For messages: `base linear`.
    pub label: String,
}

impl Spawn {
    /// A bench binary started as a worker.
    pub fn bench(exe: PathBuf, env: Vec<(String, String)>, label: String) -> Self {
        Spawn {
            exe,
            args: vec![WORKER_FLAG.to_string()],
            env,
            label,
        }
    }

    /// Start it; stderr passes through to the driver's.
    pub fn start(&self) -> Result<Process, WorkerError> {
        let mut cmd = Command::new(&self.exe);
        cmd.args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd.spawn().map_err(|e| WorkerError::Start {
            what: format!("{} ({})", self.label, self.exe.display()),
            why: e.to_string(),
        })?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(WorkerError::Start {
                what: self.label.clone(),
                why: "no pipes".into(),
            });
        };
        Ok(Process {
            child,
            stdin,
            stdout: BufReader::new(stdout),
            label: self.label.clone(),
        })
    }
}

/// A worker running as a child process.
#[derive(Debug)]
pub struct Process {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    label: String,
}

impl Process {
    fn died(&mut self) -> WorkerError {
        let why = match self.child.wait() {
            Ok(status) => status.to_string(),
            Err(e) => e.to_string(),
        };
        WorkerError::Died {
            what: self.label.clone(),
            why,
        }
    }
}

impl Worker for Process {
    fn call(&mut self, req: &Request) -> Result<Reply, WorkerError> {
        if self.stdin.write_all(req.line().as_bytes()).is_err() || self.stdin.flush().is_err() {
            return Err(self.died());
        }
        let mut line = String::new();
        loop {
            line.clear();
            match self.stdout.read_line(&mut line) {
                Ok(0) | Err(_) => return Err(self.died()),
                Ok(_) if Reply::is_reply(&line) => break,
                // a library's chatter on stdout: not ours
                Ok(_) => continue,
            }
        }
        Reply::parse(&line).map_err(|why| WorkerError::Garbled {
            what: self.label.clone(),
            why,
        })
    }

    fn label(&self) -> String {
        self.label.clone()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        // a polite quit, then make sure
        let _ = self.stdin.write_all(Request::Quit.line().as_bytes());
        let _ = self.stdin.flush();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
