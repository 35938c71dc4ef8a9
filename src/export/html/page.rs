//! The page's shell, its escaping, and the parts that are text: warnings, each run's identity, the figures.

use crate::export::json::Results;
use crate::export::plot::PageFigure;
use crate::measure::ExtrasNotes;

const STYLE: &str = include_str!("style.css");
const SCRIPT: &str = include_str!("script.js");

/// `s` as HTML text or attribute value: a label of `<script>` reads as those characters.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The document around `body`: style in the head, the script last, nothing loaded from elsewhere.
pub fn shell(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>{}</title>\n\
         <style>\n{}{STYLE}</style>\n</head>\n<body>\n<h1>{}</h1>\n{body}<div id=\"tip\" role=\"tooltip\" hidden></div>\n\
         <script>\n{SCRIPT}</script>\n</body>\n</html>\n",
        esc(title),
        font_face(),
        esc(title)
    )
}

/// The figures' text in the font their layout was measured with (the bundled subset of Noto Sans, inline), so that
/// a legend entry or a tick label takes the room it was given in any browser, where the viewer's own sans-serif
/// (DejaVu Sans here, wider) ran legend entries into each other; characters outside the subset fall back to it.
fn font_face() -> String {
    use base64::Engine as _;
    let font = base64::engine::general_purpose::STANDARD.encode(crate::export::plot::FONT_BYTES);
    format!(
        "@font-face {{ font-family: \"kvxfer-sans\"; src: url(data:font/ttf;base64,{font}) format(\"truetype\"); }}\n\
         svg text {{ font-family: \"kvxfer-sans\", sans-serif; }}\n"
    )
}

/// What a reader must know before any number: runs that did not finish or have nothing to show, how many of each
/// run's cases carry warnings, and the warnings about the runs taken together. An empty list says there is none.
pub fn warnings(runs: &[(String, &Results)], across: &[String]) -> String {
    let mut items: Vec<String> = Vec::new();
    for (name, r) in runs {
        if let Some(note) = r.incomplete_note() {
            items.push(format!("{name}: {note}"));
        } else if let Some(e) = &r.error {
            items.push(format!("{name}: this run stopped early: {e}"));
        }
        let moved = !r.cases.is_empty() || r.replay.as_ref().is_some_and(|p| !p.loads.is_empty());
        if !moved {
            items.push(format!("{name}: this run has no completed measurement; there is nothing to draw"));
        }
        // The cases' own warnings (noise, few reps, a busy host) are counted here; each is told under its run.
        if r.cases.iter().any(|c| !c.derived.warnings.is_empty()) {
            let summary = crate::export::cells::warning_summary(&r.cases);
            items.push(format!("{name}: {}", summary.trim_start_matches("⚠ ")));
        }
    }
    items.extend(across.iter().cloned());
    let mut out = String::from("<section id=\"warnings\">\n<h2>Warnings</h2>\n");
    if items.is_empty() {
        out.push_str("<p class=\"none\">None.</p>\n");
    } else {
        out.push_str("<ul>\n");
        for i in items {
            out.push_str(&format!("<li class=\"warning\">{}</li>\n", esc(&i)));
        }
        out.push_str("</ul>\n");
    }
    out.push_str("</section>\n");
    out
}

/// One run's identity: its name, label, start, version, command line (any token hidden) and fingerprint, then
/// its notes (the warnings its cases carry).
pub fn identity(name: &str, r: &Results, extras: &dyn ExtrasNotes) -> String {
    let env = &r.env;
    let text = |key: &str| env.get(key).and_then(|v| v.as_str()).unwrap_or("").to_string();
    let args: Vec<String> = env
        .get("command_line")
        .and_then(|v| v.as_array())
        .map(|a| a.iter().map(|s| s.as_str().unwrap_or("").to_string()).collect())
        .unwrap_or_default();
    let scrubbed = crate::env::scrub_token(args);
    let command = scrubbed.join(" ");
    let rows = [
        ("label", r.label.clone()),
        ("started", r.started_at.clone()),
        ("kvxfer", version(&r.kvxfer_version, &text("git_describe"))),
        ("command", command),
        ("transport", r.config.transport.to_string()),
        ("host", format!("{} — {} — {} — {} CPUs", text("hostname"), text("os"), text("kernel"), cpus(env))),
        ("cpu", text("cpu")),
    ];
    let mut out = format!("<section class=\"run\">\n<h2>{}</h2>\n<dl class=\"identity\">\n", esc(name));
    for (k, v) in rows {
        out.push_str(&format!("<dt>{k}</dt><dd data-key=\"{k}\">{}</dd>\n", esc(&v)));
    }
    out.push_str("</dl>\n");
    // Past the bound where a cluster run's console shows its summary, so does the page: thousands of flows
    // would give thousands of notes, each also in its row's `outlier` cell.
    let many = r.cluster.is_some() && !crate::export::cluster::full(crate::stats::cluster::link_count(&r.cases));
    let notes = if many {
        vec![crate::export::cells::warning_summary(&r.cases)]
    } else {
        crate::export::cells::notes(&r.cases, extras)
    };
    // A replay's numbers are its loads', as the console prints them; it has no cases to note.
    if let Some(replay) = r.replay_run() {
        let summary = crate::export::replay::summary_markdown(replay);
        out.push_str(&format!("<pre class=\"replay\">{}</pre>\n", esc(summary.trim_end())));
    }
    if !notes.is_empty() && !r.cases.is_empty() {
        out.push_str("<ul class=\"notes\">\n");
        for n in notes {
            out.push_str(&format!("<li>{}</li>\n", esc(&n)));
        }
        out.push_str("</ul>\n");
    }
    let mut shown = env.clone();
    if let Some(line) = shown.get_mut("command_line") {
        *line = serde_json::json!(scrubbed);
    }
    let fingerprint = serde_json::to_string_pretty(&shown).unwrap_or_default();
    out.push_str(&format!(
        "<details><summary>Environment fingerprint</summary><pre class=\"env\">{}</pre></details>\n</section>\n",
        esc(&fingerprint)
    ));
    out
}

/// "0.1.0 (e586a36)", or the version alone where the file names no commit (files written before it did).
fn version(version: &str, commit: &str) -> String {
    if commit.is_empty() {
        version.to_string()
    } else {
        format!("{version} ({commit})")
    }
}

fn cpus(env: &serde_json::Value) -> String {
    env.get("cpus").map(|v| v.to_string()).unwrap_or_default()
}

/// The figures, each inline as plotters wrote it (it escapes its text), with a transparent target over each of
/// its points that carries the point's words (`data-tip`, shown on hover by the script; drag on a figure zooms
/// into the box, a double click zooms out). The SVG namespace attribute is dropped: HTML knows `<svg>` without
/// it, and the page then names no address at all.
pub fn figures(figures: &[PageFigure]) -> String {
    if figures.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "<section id=\"figures\">\n<h2>Figures</h2>\n<p class=\"hint\">Point at a marker for its numbers; drag across \
         a figure to zoom into that box, double-click to zoom out.</p>\n",
    );
    for f in figures {
        let svg = f.svg.replacen(" xmlns=\"http://www.w3.org/2000/svg\"", "", 1);
        let svg = svg.trim_start_matches(|c| c != '<').trim_end();
        let (head, tail) = svg.rsplit_once("</svg>").unwrap_or((svg, ""));
        out.push_str(&format!("<figure class=\"fig\" data-stem=\"{}\">\n{head}", esc(&f.stem)));
        if !f.hover.is_empty() {
            out.push_str("<g class=\"hover\">\n");
            for p in &f.hover {
                out.push_str(&format!(
                    "<circle cx=\"{}\" cy=\"{}\" r=\"7\" data-tip=\"{}\"/>\n",
                    p.x,
                    p.y,
                    esc(&p.text)
                ));
            }
            out.push_str("</g>\n");
        }
        out.push_str(&format!("</svg>{tail}\n<figcaption>{}</figcaption>\n</figure>\n", esc(&f.stem)));
    }
    out.push_str("</section>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_character_that_could_open_markup_is_escaped() {
        assert_eq!(
            esc("<script>a & 'b' \"c\"</script>"),
            "&lt;script&gt;a &amp; &#39;b&#39; &quot;c&quot;&lt;/script&gt;"
        );
        assert_eq!(esc("0@host→1 µs"), "0@host→1 µs");
    }

    struct NoExtras;
    impl ExtrasNotes for NoExtras {}

    #[test]
    fn a_runs_identity_hides_any_token_and_keeps_its_label_as_text() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("results/tcp-loopback.json");
        let mut r = Results::read(&path).unwrap();
        r.label = "<b>x</b>".into();
        r.env["command_line"] =
            serde_json::json!(["kvxfer", "send", "--token", "s3cret", "--token=s3cret2", "--peer", "h:1"]);
        let html = identity("run", &r, &NoExtras);
        assert!(!html.contains("s3cret"), "{html}");
        assert!(html.contains("kvxfer send --token (hidden) --token=(hidden) --peer h:1"), "{html}");
        assert!(html.contains("&lt;b&gt;x&lt;/b&gt;") && !html.contains("<b>x"), "{html}");
    }

    #[test]
    fn a_figure_is_inlined_without_its_namespace_address() {
        let svg = "<svg width=\"10\" height=\"10\" viewBox=\"0 0 10 10\" xmlns=\"http://www.w3.org/2000/svg\">\n</svg>";
        let hover = vec![crate::export::plot::HoverPoint { x: 3, y: 4, text: "<script>".into() }];
        let page = figures(&[PageFigure { stem: "a<b".into(), svg: svg.into(), hover }]);
        assert!(!page.contains("http"), "{page}");
        assert!(page.contains("data-stem=\"a&lt;b\""), "{page}");
        // The point's target goes inside the figure's SVG, its words as text.
        let target = page.find("<circle cx=\"3\" cy=\"4\" r=\"7\" data-tip=\"&lt;script&gt;\"/>").expect(&page);
        assert!(target < page.find("</svg>").unwrap(), "{page}");
    }
}
