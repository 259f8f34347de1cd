//! What a run measured, for the options that default to it (`predict`'s `--model` and
//! `--ctx`): one model is taken as it is, several are listed; of several cache lengths the
//! longest is taken and said.

use std::collections::BTreeSet;

use rundir::Run;

/// The models whose decoder ops the run timed (shapes/ names; the floor's `none` and the
/// ceilings' aside).
pub fn models(run: &Run) -> BTreeSet<String> {
    run.results
        .iter()
        .map(|r| r.key.model.clone())
        .filter(|m| !m.is_empty() && m != "none")
        .collect()
}

/// `--model` where given, else the run's one model; several or none is a one-line error
/// naming what the run has.
pub fn model(given: Option<&str>, run: &Run) -> Result<String, String> {
    if let Some(m) = given {
        return Ok(m.to_string());
    }
    let all = models(run);
    match all.len() {
        1 => Ok(all.into_iter().next().unwrap_or_default()),
        0 => Err(
            "--model: the run timed no model's ops; name one (a shapes/ name or a config.json)"
                .into(),
        ),
        _ => Err(format!(
            "--model: the run timed {}; choose one",
            all.into_iter().collect::<Vec<_>>().join(", ")
        )),
    }
}

/// `--ctx` where given, else the run's decode cache length of `model` (of several, the
/// longest, said on stderr); none is a one-line error saying how to measure one.
pub fn decode_ctx(given: Option<usize>, run: &Run, model: &str) -> Result<usize, String> {
    if let Some(l) = given {
        return Ok(l);
    }
    let all = analysis::predict::measured_lengths(run, model);
    let list = || {
        all.iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    match all.len() {
        1 => Ok(all.iter().next().copied().unwrap_or_default()),
        0 => Err(format!(
            "--ctx: the run has no decode rows of {model} to take L from; give --ctx, or measure \
             them: OPBENCH_MODEL={model} scripts/bench"
        )),
        _ => {
            // the longest the run timed, said on stderr: the answer stays the first screen
            let l = all.iter().next_back().copied().unwrap_or_default();
            eprintln!(
                "opbench: --ctx not given: L = {l}, the longest of {} the run timed",
                list()
            );
            Ok(l)
        }
    }
}
