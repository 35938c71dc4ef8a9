//! Text measured and drawn the same way on every backend: a wrapper that sizes text with the bundled font at an em
//! of `size` pixels, so label placement and the legend's layout see the boxes the reader sees.
//!
//! - PNG: plotters 0.3.7 draws each glyph at the pen position without its left side bearing, so "512" reads "51 2"
//!   and "transport" reads "transpor t". The wrapper rasterizes text itself with ab_glyph's own positioning
//!   (bearings and kerning) and plotters' anchors and rotations.
//! - SVG: plotters writes `font-size` as `size / 1.24` and measures at yet another scale; the wrapper hands it
//!   `size × 1.24`, so the SVG's text has the PNG's em and both figures share one layout.
//! - [`Measure`]: draws nothing, for a layout pass that only needs to know where labels would go.

use ab_glyph::{point, Font, FontRef, PxScale, ScaleFont};
use plotters::prelude::DrawingBackend;
use plotters_backend::text_anchor::{HPos, Pos, VPos};
use plotters_backend::{
    BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingErrorKind, FontFamily, FontStyle, FontTransform,
};

/// How the wrapped backend gets its text onto the page.
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum TextMode {
    /// Rasterized here, pixel by pixel (the bitmap backend).
    Raster,
    /// Handed to the backend at `size × 1.24`, which it writes back as an em of `size` (the SVG backend).
    Svg,
}

pub struct TextFix<B> {
    inner: B,
    font: Option<FontRef<'static>>,
    mode: TextMode,
}

impl<B: DrawingBackend> TextFix<B> {
    pub fn new(inner: B, font: &'static [u8], mode: TextMode) -> TextFix<B> {
        TextFix { inner, font: FontRef::try_from_slice(font).ok(), mode }
    }
}

/// plotters' SVG backend writes `font-size` as the style's size divided by this.
const SVG_EM_DIVISOR: f64 = 1.24;

/// A text style with its size scaled, everything else as given.
struct Scaled<'a, S>(&'a S, f64);

impl<S: BackendTextStyle> BackendTextStyle for Scaled<'_, S> {
    type FontError = S::FontError;
    fn color(&self) -> BackendColor {
        self.0.color()
    }
    fn size(&self) -> f64 {
        self.0.size() * self.1
    }
    fn transform(&self) -> FontTransform {
        self.0.transform()
    }
    fn style(&self) -> FontStyle {
        self.0.style()
    }
    fn anchor(&self) -> Pos {
        self.0.anchor()
    }
    fn family(&self) -> FontFamily<'_> {
        self.0.family()
    }
    fn layout_box(&self, text: &str) -> Result<((i32, i32), (i32, i32)), Self::FontError> {
        self.0.layout_box(text)
    }
    fn draw<E, F: FnMut(i32, i32, BackendColor) -> Result<(), E>>(
        &self,
        text: &str,
        pos: BackendCoord,
        draw: F,
    ) -> Result<Result<(), E>, Self::FontError> {
        self.0.draw(text, pos, draw)
    }
}

/// A backend that draws nothing: a layout pass on it (wrapped in [`TextFix`]) measures text as the real one does.
pub struct Measure(pub (u32, u32));

impl DrawingBackend for Measure {
    type ErrorType = std::convert::Infallible;

    fn get_size(&self) -> (u32, u32) {
        self.0
    }
    fn ensure_prepared(&mut self) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        Ok(())
    }
    fn present(&mut self) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        Ok(())
    }
    fn draw_pixel(&mut self, _: BackendCoord, _: BackendColor) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        Ok(())
    }
    fn draw_line<S: BackendStyle>(
        &mut self,
        _: BackendCoord,
        _: BackendCoord,
        _: &S,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        Ok(())
    }
    fn draw_rect<S: BackendStyle>(
        &mut self,
        _: BackendCoord,
        _: BackendCoord,
        _: &S,
        _: bool,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        Ok(())
    }
    fn draw_path<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        _: I,
        _: &S,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        Ok(())
    }
    fn draw_circle<S: BackendStyle>(
        &mut self,
        _: BackendCoord,
        _: u32,
        _: &S,
        _: bool,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        Ok(())
    }
    fn fill_polygon<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        _: I,
        _: &S,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        Ok(())
    }
    fn draw_text<S: BackendTextStyle>(
        &mut self,
        _: &str,
        _: &S,
        _: BackendCoord,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        Ok(())
    }
    fn blit_bitmap(
        &mut self,
        _: BackendCoord,
        _: (u32, u32),
        _: &[u8],
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        Ok(())
    }
}

/// Glyphs of `text` at `size` px per em: (glyph, x of its pen position) and the advance width of the whole line.
fn layout(font: &FontRef<'static>, size: f64, text: &str) -> (Vec<(ab_glyph::GlyphId, f32)>, f32, PxScale) {
    // ab_glyph's scale is the ascent-to-descent height; convert so `size` is the em, as in CSS and SVG.
    let em_height = (font.ascent_unscaled() - font.descent_unscaled()) / font.units_per_em().unwrap_or(1000.0);
    let scale = PxScale::from(size as f32 * em_height);
    let sf = font.as_scaled(scale);
    let (mut pen, mut prev, mut out) = (0f32, None, Vec::new());
    for c in text.chars() {
        let id = sf.glyph_id(c);
        if let Some(p) = prev {
            pen += sf.kern(p, id);
        }
        out.push((id, pen));
        pen += sf.h_advance(id);
        prev = Some(id);
    }
    (out, pen, scale)
}

impl<B: DrawingBackend> DrawingBackend for TextFix<B> {
    type ErrorType = B::ErrorType;

    fn get_size(&self) -> (u32, u32) {
        self.inner.get_size()
    }
    fn ensure_prepared(&mut self) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        self.inner.ensure_prepared()
    }
    fn present(&mut self) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        self.inner.present()
    }
    fn draw_pixel(&mut self, p: BackendCoord, c: BackendColor) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        self.inner.draw_pixel(p, c)
    }
    fn draw_line<S: BackendStyle>(
        &mut self,
        from: BackendCoord,
        to: BackendCoord,
        style: &S,
    ) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        self.inner.draw_line(from, to, style)
    }
    fn draw_rect<S: BackendStyle>(
        &mut self,
        a: BackendCoord,
        b: BackendCoord,
        style: &S,
        fill: bool,
    ) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        self.inner.draw_rect(a, b, style, fill)
    }
    fn draw_path<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        path: I,
        style: &S,
    ) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        self.inner.draw_path(path, style)
    }
    fn draw_circle<S: BackendStyle>(
        &mut self,
        c: BackendCoord,
        r: u32,
        style: &S,
        fill: bool,
    ) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        self.inner.draw_circle(c, r, style, fill)
    }
    fn fill_polygon<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        vert: I,
        style: &S,
    ) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        self.inner.fill_polygon(vert, style)
    }
    fn blit_bitmap(
        &mut self,
        pos: BackendCoord,
        dim: (u32, u32),
        src: &[u8],
    ) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        self.inner.blit_bitmap(pos, dim, src)
    }

    fn estimate_text_size<S: BackendTextStyle>(
        &self,
        text: &str,
        style: &S,
    ) -> Result<(u32, u32), DrawingErrorKind<B::ErrorType>> {
        match &self.font {
            Some(f) => Ok((layout(f, style.size(), text).1.ceil() as u32, style.size().ceil() as u32)),
            None => self.inner.estimate_text_size(text, style),
        }
    }

    fn draw_text<S: BackendTextStyle>(
        &mut self,
        text: &str,
        style: &S,
        pos: BackendCoord,
    ) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        let colour = style.color();
        if self.mode == TextMode::Svg {
            return self.inner.draw_text(text, &Scaled(style, SVG_EM_DIVISOR), pos);
        }
        let Some(font) = self.font.clone() else { return self.inner.draw_text(text, style, pos) };
        if colour.alpha == 0.0 {
            return Ok(());
        }
        let size = style.size();
        let (glyphs, width, scale) = layout(&font, size, text);
        let sf = font.as_scaled(scale);
        // The box is one em tall with the baseline where the font's ascent puts it.
        let (w, h) = (width.round() as i32, size.round() as i32);
        let dx = match style.anchor().h_pos {
            HPos::Left => 0,
            HPos::Right => -w,
            HPos::Center => -w / 2,
        };
        let dy = match style.anchor().v_pos {
            VPos::Top => 0,
            VPos::Center => -h / 2,
            VPos::Bottom => -h,
        };
        let baseline = sf.ascent();
        let trans = style.transform();
        let (cw, ch) = self.get_size();
        for (id, x) in glyphs {
            let Some(outline) = font.outline_glyph(id.with_scale_and_position(scale, point(x, baseline))) else {
                continue;
            };
            let b = outline.px_bounds();
            let mut pixels = Vec::new();
            outline.draw(|gx, gy, cov| pixels.push((b.min.x as i32 + gx as i32, b.min.y as i32 + gy as i32, cov)));
            for (px, py, cov) in pixels {
                let (tx, ty) = trans.transform(px + dx, py + dy);
                let (tx, ty) = (pos.0 + tx, pos.1 + ty);
                if cov > 0.0 && tx >= 0 && ty >= 0 && tx < cw as i32 && ty < ch as i32 {
                    let c = BackendColor { alpha: colour.alpha * cov.min(1.0) as f64, rgb: colour.rgb };
                    self.inner.draw_pixel((tx, ty), c)?;
                }
            }
        }
        Ok(())
    }
}
