//! Headless Chromium for the browser tests (the status page, `replay --format html`): the DOM
//! after load (`--dump-dom`), and screenshots decoded so tests can assert on their pixels.

use std::path::Path;
use std::process::Command;

/// The flags every run gets: no sandbox (root in CI), nothing fetched in the background.
const FLAGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
];

fn chromium(profile: &Path, size: (u32, u32), extra: &[String], url: &str) -> std::process::Output {
    let out = Command::new("chromium")
        .args(FLAGS)
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--window-size={},{}", size.0, size.1))
        .args(extra)
        .arg(url)
        .output()
        .expect("chromium not found: apt-get install chromium");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The DOM after Chromium loaded `url` (at `size`) and ran whatever scripts it has.
pub fn dump_dom(url: &str, profile: &Path, size: (u32, u32)) -> String {
    let out = chromium(
        profile,
        size,
        &["--dump-dom".into(), "--virtual-time-budget=3000".into()],
        url,
    );
    String::from_utf8(out.stdout).expect("utf-8 DOM")
}

/// A decoded screenshot (RGB).
pub struct Screenshot {
    pub width: u32,
    pub height: u32,
    pub rgb: Vec<u8>,
}

impl Screenshot {
    /// Pixels within `tol` of `rgb` on every channel.
    pub fn count(&self, rgb: [u8; 3], tol: u8) -> usize {
        self.rgb
            .chunks_exact(3)
            .filter(|p| p.iter().zip(rgb).all(|(a, b)| a.abs_diff(b) <= tol))
            .count()
    }

    /// Distinct colours (a blank or failed page has a handful).
    pub fn colours(&self) -> usize {
        let mut set: std::collections::HashSet<[u8; 3]> = std::collections::HashSet::new();
        for p in self.rgb.chunks_exact(3) {
            set.insert([p[0], p[1], p[2]]);
        }
        set.len()
    }
}

/// Screenshots `url` at `size` into `file` (kept for a reader) and decodes it.
pub fn screenshot(url: &str, profile: &Path, size: (u32, u32), file: &Path) -> Screenshot {
    chromium(
        profile,
        size,
        &[
            format!("--screenshot={}", file.display()),
            "--virtual-time-budget=3000".into(),
        ],
        url,
    );
    let decoder = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(file).expect("the screenshot was written"),
    ));
    let mut reader = decoder.read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size().expect("PNG size")];
    let info = reader.next_frame(&mut buf).expect("PNG frame");
    let step = match info.color_type {
        png::ColorType::Rgb => 3,
        png::ColorType::Rgba => 4,
        other => panic!("unexpected PNG colour type {other:?}"),
    };
    assert_eq!(info.bit_depth, png::BitDepth::Eight);
    let rgb = buf[..info.buffer_size()]
        .chunks_exact(step)
        .flat_map(|p| [p[0], p[1], p[2]])
        .collect();
    Screenshot {
        width: info.width,
        height: info.height,
        rgb,
    }
}

/// The page's width as laid out in a viewport `width` px wide
/// (`document.documentElement.scrollWidth`; over `width` means a horizontal scroll). `html` (the
/// page's markup, with `base` for its relative URLs) is laid out in an iframe of that width,
/// measured by the frame around it: headless Chromium keeps its window at least 500 px wide, so
/// `--window-size=390,...` alone would lay a page out wider than a phone.
pub fn layout_width(html: &str, base: &str, profile: &Path, width: u32) -> u32 {
    let page = html.replacen("<head>", &format!("<head><base href=\"{base}\">"), 1);
    let srcdoc = page
        .replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    let frame = format!(
        "<!doctype html><html><body style=\"margin:0\"><iframe id=\"f\" style=\"width:{width}px;height:844px;border:0\" srcdoc=\"{srcdoc}\"></iframe><script>var f=document.getElementById('f');f.addEventListener('load',function(){{document.body.setAttribute('data-scroll-width',String(f.contentDocument.documentElement.scrollWidth));}});</script></body></html>"
    );
    let file = profile.with_extension(format!("frame-{width}.html"));
    std::fs::write(&file, frame).expect("write the frame page");
    let dom = dump_dom(&format!("file://{}", file.display()), profile, (1280, 900));
    let attr = "data-scroll-width=\"";
    let at = dom.find(attr).unwrap_or_else(|| panic!("no width measured: {dom}")) + attr.len();
    dom[at..]
        .split('"')
        .next()
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("bad width in {dom}"))
}
