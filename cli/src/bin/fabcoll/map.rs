//! Decision maps: the fastest algorithm per (p, size) as a coloured grid, written as SVG or PNG
//! (by the path's extension) with `plotters`, like Fig 14 of thakur §5.4. Used by
//! `fabcoll sim --map` (simulated winners) and `fabcoll tune --plot` (measured winners).
//!
//! Layout: message size on the x axis (log2), process count on the y axis (linear when the
//! listed p are evenly spaced, as in `--ps 2..=128`, else log2); each cell spans half-way to its
//! neighbours, so gaps in the lists do not leave holes. The legend on the right lists the
//! algorithms present, each in a colour fixed by its name ([`colour`]) so that maps of different
//! machines or ops can be compared side by side. Text is drawn with the embedded DejaVu Sans
//! (assets/fonts, Bitstream Vera licence), so rendering needs no system fonts.

use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;

/// One decision map.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MapGrid {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    /// Process counts (rows), strictly increasing.
    pub ps: Vec<u32>,
    /// Message sizes in bytes (columns), strictly increasing.
    pub sizes: Vec<u64>,
    /// `cells[i_p][i_size]` = the winning algorithm's name (`None`: no eligible algorithm).
    pub cells: Vec<Vec<Option<String>>>,
    /// A line under the map (e.g. the machine parameters).
    pub note: String,
}

const WIDTH: u32 = 1200;
const HEIGHT: u32 = 860;
const LEGEND_WIDTH: u32 = 250;
const FONT: &str = "sans-serif";
static FONT_BYTES: &[u8] = include_bytes!("../../../assets/fonts/DejaVuSans.ttf");

/// Colours of the algorithms that are usually on a map (allreduce's rows and the common names of
/// other ops); any other name gets a colour derived from a hash of the name.
const KNOWN: &[(&str, (u8, u8, u8))] = &[
    ("recursive_doubling", (0x1f, 0x77, 0xb4)),
    ("rabenseifner", (0xd6, 0x27, 0x28)),
    ("binary_blocks", (0x2c, 0xa0, 0x2c)),
    ("ring", (0xff, 0x7f, 0x0e)),
    ("rsag_halving_ring", (0x94, 0x67, 0xbd)),
    ("rsag_pairwise_ring", (0x8c, 0x56, 0x4b)),
    ("reduce_bcast", (0xe3, 0x77, 0xc2)),
    ("allgather_reduce", (0x7f, 0x7f, 0x7f)),
    ("binomial", (0xbc, 0xbd, 0x22)),
    ("bruck", (0x17, 0xbe, 0xcf)),
    ("pairwise", (0xff, 0xbb, 0x78)),
    ("linear", (0x98, 0xdf, 0x8a)),
    ("recursive_halving", (0xff, 0x98, 0x96)),
    ("van_de_geijn", (0xc5, 0xb0, 0xd5)),
    ("dissemination", (0xc4, 0x9c, 0x94)),
];

/// The colour of an algorithm on every map: a fixed table for the usual names, otherwise a hue
/// from an FNV-1a hash of the name (deterministic across runs and machines).
pub fn colour(name: &str) -> RGBColor {
    if let Some((_, (r, g, b))) = KNOWN.iter().find(|(n, _)| *n == name) {
        return RGBColor(*r, *g, *b);
    }
    let h = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    let hue = (h % 360) as f64 / 360.0;
    let light = 0.45 + ((h >> 16) % 3) as f64 * 0.1;
    let c = HSLColor(hue, 0.65, light).to_rgba();
    RGBColor(c.0, c.1, c.2)
}

const EMPTY: RGBColor = RGBColor(0xee, 0xee, 0xee);

/// Writes the map to `path`: SVG for `.svg`, PNG for `.png`.
pub fn render(grid: &MapGrid, path: &Path) -> Result<(), String> {
    check(grid)?;
    register_font()?;
    let ext = path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
    let res = match ext.as_deref() {
        Some("svg") => {
            draw(SVGBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area(), grid).map_err(|e| e.to_string())
        }
        Some("png") => {
            draw(BitMapBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area(), grid).map_err(|e| e.to_string())
        }
        _ => return Err(format!("{}: the map's file name must end in .svg or .png", path.display())),
    };
    res.map_err(|e| format!("drawing {}: {e}", path.display()))
}

fn register_font() -> Result<(), String> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        plotters::style::register_font(FONT, FontStyle::Normal, FONT_BYTES)
            .map_err(|_| "the embedded font assets/fonts/DejaVuSans.ttf is not a valid TrueType font".to_string())
    })
    .clone()
}

fn check(g: &MapGrid) -> Result<(), String> {
    if g.ps.is_empty() || g.sizes.is_empty() {
        return Err("a map needs at least one process count and one size".into());
    }
    if g.ps.windows(2).any(|w| w[0] >= w[1]) || g.ps[0] == 0 {
        return Err(format!("the process counts must be positive and strictly increasing: {:?}", g.ps));
    }
    if g.sizes.windows(2).any(|w| w[0] >= w[1]) || g.sizes[0] == 0 {
        return Err(format!("the sizes must be positive and strictly increasing: {:?}", g.sizes));
    }
    if g.cells.len() != g.ps.len() || g.cells.iter().any(|row| row.len() != g.sizes.len()) {
        return Err(format!("the map's cells must be {} rows (p) of {} columns (sizes)", g.ps.len(), g.sizes.len()));
    }
    Ok(())
}

/// An axis: where each value sits and the cell edges half-way between neighbours.
struct Axis {
    log2: bool,
    /// `edges[i]..edges[i + 1]` is cell i, in axis coordinates.
    edges: Vec<f64>,
}

impl Axis {
    fn new(values: &[f64], log2: bool) -> Axis {
        let c: Vec<f64> = values.iter().map(|&v| if log2 { v.log2() } else { v }).collect();
        let last = c.len() - 1;
        // a single value gets a cell one unit wide
        let (first_gap, last_gap) = if last > 0 { (c[1] - c[0], c[last] - c[last - 1]) } else { (1.0, 1.0) };
        let mut edges = Vec::with_capacity(c.len() + 1);
        edges.push(c[0] - first_gap / 2.0);
        edges.extend(c.windows(2).map(|w| (w[0] + w[1]) / 2.0));
        edges.push(c[last] + last_gap / 2.0);
        Axis { log2, edges }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.edges[0]..self.edges[self.edges.len() - 1]
    }
}

/// Whether the values are evenly spaced (then a linear axis gives every cell the same size).
fn evenly_spaced(v: &[u32]) -> bool {
    v.len() < 3 || v.windows(2).all(|w| w[1] - w[0] == v[1] - v[0])
}

/// `8`, `512`, `1K`, `64K`, `4M`, `1G`: a size in bytes with binary suffixes where exact.
pub fn size_label(bytes: u64) -> String {
    for (shift, suffix) in [(30, "G"), (20, "M"), (10, "K")] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{}{suffix}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// A tick label on a log2 axis: only at whole powers of two.
fn pow2_label(v: f64, fmt: impl Fn(u64) -> String) -> String {
    let r = v.round();
    if (v - r).abs() < 1e-6 && (0.0..63.0).contains(&r) {
        fmt(1u64 << r as u32)
    } else {
        String::new()
    }
}

/// The algorithms on the map, sorted by name, and whether some cell has none.
fn legend_entries(g: &MapGrid) -> (Vec<&str>, bool) {
    let mut names: Vec<&str> = g.cells.iter().flatten().flatten().map(String::as_str).collect();
    names.sort_unstable();
    names.dedup();
    (names, g.cells.iter().flatten().any(Option::is_none))
}

type DrawResult<E> = Result<(), DrawingAreaErrorKind<E>>;

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, g: &MapGrid) -> DrawResult<DB::ErrorType> {
    root.fill(&WHITE)?;
    let (plot, legend) = root.split_horizontally(WIDTH - LEGEND_WIDTH);
    let (plot, foot) = plot.split_vertically(HEIGHT - 40);
    let xs: Vec<f64> = g.sizes.iter().map(|&s| s as f64).collect();
    let ys: Vec<f64> = g.ps.iter().map(|&p| f64::from(p)).collect();
    let x = Axis::new(&xs, true);
    let y = Axis::new(&ys, !evenly_spaced(&g.ps));
    let mut chart = ChartBuilder::on(&plot)
        .caption(&g.title, (FONT, 22))
        .margin(12)
        .x_label_area_size(48)
        .y_label_area_size(56)
        .build_cartesian_2d(x.range(), y.range())?;
    let y_fmt = |v: &f64| {
        if y.log2 {
            pow2_label(*v, |p| p.to_string())
        } else if (v - v.round()).abs() < 1e-6 {
            format!("{}", v.round() as i64)
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .disable_mesh()
        .x_labels(g.sizes.len().clamp(2, 24))
        .y_labels(16)
        .x_label_formatter(&|v| pow2_label(*v, size_label))
        .y_label_formatter(&y_fmt)
        .x_desc(&g.x_label)
        .y_desc(&g.y_label)
        .axis_desc_style((FONT, 16))
        .label_style((FONT, 13))
        .draw()?;
    let cells = g.cells.iter().enumerate().flat_map(|(i, row)| {
        let (y, x) = (&y, &x);
        row.iter().enumerate().map(move |(j, c)| {
            let fill = c.as_deref().map_or(EMPTY, colour);
            Rectangle::new([(x.edges[j], y.edges[i]), (x.edges[j + 1], y.edges[i + 1])], fill.filled())
        })
    });
    chart.draw_series(cells)?;
    foot.draw(&Text::new(g.note.clone(), (16, 10), (FONT, 14).into_font().color(&BLACK)))?;

    let (names, has_empty) = legend_entries(g);
    let entries = names.iter().map(|&n| (n, colour(n))).chain(has_empty.then_some(("(none eligible)", EMPTY)));
    legend.draw(&Text::new("algorithm", (12, 50), (FONT, 16).into_font().color(&BLACK)))?;
    for (k, (name, c)) in entries.enumerate() {
        let top = 80 + 26 * k as i32;
        legend.draw(&Rectangle::new([(12, top), (30, top + 18)], c.filled()))?;
        legend.draw(&Rectangle::new([(12, top), (30, top + 18)], BLACK.stroke_width(1)))?;
        legend.draw(&Text::new(name.to_string(), (38, top + 2), (FONT, 15).into_font().color(&BLACK)))?;
    }
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_labels() {
        assert_eq!(size_label(8), "8");
        assert_eq!(size_label(1536), "1536");
        assert_eq!(size_label(2048), "2K");
        assert_eq!(size_label(4 << 20), "4M");
    }

    #[test]
    fn colours_are_stable_and_distinct() {
        assert_eq!(colour("ring"), RGBColor(0xff, 0x7f, 0x0e));
        assert_eq!(colour("some_new_algorithm"), colour("some_new_algorithm"));
        let known: Vec<_> = KNOWN.iter().map(|(n, _)| colour(n)).collect();
        for (i, a) in known.iter().enumerate() {
            assert!(known[i + 1..].iter().all(|b| b != a), "colour of {} repeated", KNOWN[i].0);
        }
    }

    #[test]
    fn cell_edges_meet_half_way() {
        let a = Axis::new(&[8.0, 16.0, 64.0], true);
        assert_eq!(a.edges, vec![2.5, 3.5, 5.0, 7.0]);
        let b = Axis::new(&[2.0, 3.0, 4.0], false);
        assert_eq!(b.edges, vec![1.5, 2.5, 3.5, 4.5]);
        assert!(evenly_spaced(&[2, 3, 4]) && !evenly_spaced(&[2, 4, 8]));
    }

    fn grid() -> MapGrid {
        let name = |s: &str| Some(s.to_string());
        MapGrid {
            title: "test map".into(),
            x_label: "bytes".into(),
            y_label: "p".into(),
            ps: vec![2, 3, 4],
            sizes: vec![8, 16, 32, 64],
            cells: vec![
                vec![name("recursive_doubling"), name("recursive_doubling"), name("ring"), name("ring")],
                vec![name("recursive_doubling"), None, name("ring"), name("binary_blocks")],
                vec![name("rabenseifner"), name("rabenseifner"), name("ring"), name("binary_blocks")],
            ],
            note: "α = 1 µs".into(),
        }
    }

    #[test]
    fn renders_svg_and_png() {
        let dir = std::env::temp_dir().join(format!("fabcoll-map-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for ext in ["svg", "png"] {
            let path = dir.join(format!("m.{ext}"));
            render(&grid(), &path).unwrap();
            let bytes = std::fs::read(&path).unwrap();
            assert!(bytes.len() > 1000, "{ext}: {} bytes", bytes.len());
            if ext == "svg" {
                let s = String::from_utf8(bytes).unwrap();
                for n in ["recursive_doubling", "ring", "binary_blocks", "rabenseifner", "(none eligible)"] {
                    assert!(s.contains(n), "legend lacks {n}");
                }
            } else {
                assert_eq!(&bytes[1..4], b"PNG");
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_input_is_an_error() {
        let mut g = grid();
        g.cells.pop();
        assert!(render(&g, Path::new("/tmp/x.svg")).unwrap_err().contains("rows"));
        assert!(render(&grid(), Path::new("/tmp/x.jpg")).unwrap_err().contains(".svg or .png"));
        let mut g = grid();
        g.sizes = vec![8, 8, 32, 64];
        assert!(render(&g, Path::new("/tmp/x.svg")).is_err());
    }
}
