//! predict's first lines: the answer before the details ([`analysis::help::answer`]).

use analysis::explain::Explanation;

/// The answer's lines (none where the explanation has no "what would help": a prefill).
pub fn answer(e: &Explanation) {
    if let Some((levers, _)) = &e.help {
        for line in analysis::help::answer(&e.query, &e.prediction, levers) {
            println!("{line}");
        }
    }
}
