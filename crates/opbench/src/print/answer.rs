//! predict's first lines: the answer before the details. What the step gives (predicted,
//! and measured where the run has it), what bounds it, the best remedies for the query's
//! own sequences with what to do, and one line on serving more sequences at once.

use analysis::explain::Explanation;
use analysis::help::{AS_IS, Lever};

/// At most this many remedies on the answer's line.
const TOP: usize = 3;

/// The answer's lines (none where the explanation has no "what would help": a prefill).
pub fn answer(e: &Explanation) {
    let Some((levers, _)) = &e.help else {
        return;
    };
    let (q, pred) = (&e.query, &e.prediction);
    let as_is = levers.iter().find(|l| l.name == AS_IS);
    let measured = as_is
        .and_then(|l| l.measured_ns)
        .map_or(String::new(), |m| {
            format!(", {:.1} measured", q.batch as f64 * 1e9 / m)
        });
    let bound = if !pred.gpu {
        "on the CPU, its calls in turn".to_string()
    } else if pred.host_bound() {
        format!(
            "bound by the host (dispatch, launch, Python): the GPU is busy ~{:.0}% of the step",
            100.0 * pred.device_ns / pred.step_ns
        )
    } else {
        "bound by the kernels".to_string()
    };
    println!(
        "answer: {:.1} tokens/s predicted{measured}; {bound}",
        q.batch as f64 * 1e9 / pred.step_ns
    );
    let base = as_is.and_then(Lever::tokens_per_s);
    let gain = |l: &Lever| Some(l.tokens_per_s()? / base?);
    let mine: Vec<&Lever> = levers
        .iter()
        .filter(|l| l.batch == q.batch && l.name != AS_IS)
        .filter(|l| gain(l).is_some_and(|g| g > 1.01))
        .take(TOP)
        .collect();
    let who = match q.batch {
        1 => "your sequence".to_string(),
        b => format!("your {b} sequences"),
    };
    match mine.first() {
        Some(top) => {
            let ranked: Vec<String> = mine
                .iter()
                .map(|l| {
                    format!(
                        "{} {} tokens/s ({:.2}×)",
                        l.name,
                        rate(l.tokens_per_s().unwrap_or_default()),
                        gain(l).unwrap_or_default()
                    )
                })
                .collect();
            println!("  faster for {who}: {}", ranked.join("; "));
            println!("  first: {}", top.action);
        }
        None => println!("  nothing this run prices makes {who} faster (what would help, below)"),
    }
    if let Some(more) = levers
        .iter()
        .find(|l| l.batch != q.batch && l.tokens_per_s().is_some())
    {
        println!(
            "  serving more sequences instead: {} gives {} tokens/s in all, {:.1} a sequence",
            more.name,
            rate(more.tokens_per_s().unwrap_or_default()),
            more.per_stream().unwrap_or_default()
        );
    }
}

/// Tokens/s to a whole number from 100, else to one decimal.
fn rate(t: f64) -> String {
    if t >= 100.0 {
        format!("{t:.0}")
    } else {
        format!("{t:.1}")
    }
}
