//! predict's first lines: the answer before the details ([`analysis::answer::answer`]).

use analysis::explain::Explanation;

/// The answer's lines (none where the explanation has no "what would help": a prefill).
pub fn answer(e: &Explanation) {
    if let Some((levers, _)) = &e.help {
        let generate = e.transformers.as_ref().and_then(|t| t.generate.as_ref());
        for line in analysis::answer::answer(&e.query, &e.prediction, levers, generate) {
            say!("{line}");
        }
    }
}
