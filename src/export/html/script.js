// The page's own script: sorting and filtering tables, the points' and the heatmap's tooltips, zoom. No library, nothing fetched.
(function () {
  "use strict";
  var each = function (list, f) { Array.prototype.forEach.call(list, f); };

  // A cell's number when it is one ("12.5", "1e-3", a size "96 MiB", tokens "1k", a ratio "0.50×"), else NaN:
  // numbers sort as numbers, the rest as text.
  var UNITS = { "": 1, "\u00d7": 1, "B": 1, "k": 1024, "KiB": 1024, "MiB": 1048576, "GiB": 1073741824,
                "TiB": 1099511627776 };
  function number(text) {
    var m = /^(-?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?)\s*(\u00d7|B|k|KiB|MiB|GiB|TiB)?$/.exec(text.trim());
    return m ? parseFloat(m[1]) * UNITS[m[4] || ""] : NaN;
  }

  // Tables whose rows come as data (a 64-rank run has thousands): built here, as text, never as markup.
  each(document.querySelectorAll("table[data-source]"), function (table) {
    var data = JSON.parse(document.getElementById(table.getAttribute("data-source")).textContent);
    var body = table.tBodies[0];
    data.rows.forEach(function (row) {
      var tr = document.createElement("tr");
      row.forEach(function (v) { var td = document.createElement("td"); td.textContent = v; tr.appendChild(td); });
      body.appendChild(tr);
    });
  });

  each(document.querySelectorAll("table.sortable"), function (table) {
    var heads = table.tHead.rows[0].cells;
    each(heads, function (th, col) {
      th.addEventListener("click", function () {
        var up = th.getAttribute("data-sort") !== "asc";
        each(heads, function (h) { h.removeAttribute("data-sort"); });
        th.setAttribute("data-sort", up ? "asc" : "desc");
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = a.cells[col].textContent, y = b.cells[col].textContent;
          var nx = number(x), ny = number(y), r;
          if (!isNaN(nx) && !isNaN(ny)) r = nx - ny;
          else if (isNaN(nx) !== isNaN(ny)) r = isNaN(nx) ? 1 : -1;
          else r = x.localeCompare(y);
          return up ? r : -r;
        });
        rows.forEach(function (row) { body.appendChild(row); });
      });
    });
  });

  each(document.querySelectorAll("input.filter"), function (box) {
    var table = document.getElementById(box.getAttribute("data-table"));
    box.addEventListener("input", function () {
      var q = box.value.toLowerCase();
      each(table.tBodies[0].rows, function (row) {
        row.hidden = q !== "" && row.textContent.toLowerCase().indexOf(q) < 0;
      });
    });
  });

  var tip = document.getElementById("tip");
  function tipText(c) {
    var d = function (k) { return c.getAttribute("data-" + k); };
    var names = JSON.parse(c.ownerSVGElement.getAttribute("data-names"));
    var marks = d("marks") ? " [" + d("marks") + "]" : "";
    return names[+d("src")] + " \u2192 " + names[+d("dst")] + ": p50 " + d("p50") + " GB/s (min " + d("min") +
      ", max " + d("max") + "), " + d("reps") + " reps" + marks + "; counters: " +
      (d("verdict") || "no counter stands out");
  }
  // A host pair's numbers sit once in its section's JSON: [src, dst, links, median, min, max, slow, bimodal,
  // slowest link, its p50].
  function pairText(c) {
    var section = c.closest("section");
    if (!section.pairs) section.pairs = JSON.parse(section.querySelector("script.hostmap-data").textContent);
    var h = section.pairs.hosts, p = section.pairs.pairs[+c.getAttribute("data-pair")];
    return h[p[0]] + " \u2192 " + h[p[1]] + ": " + p[2] + (p[2] === 1 ? " link" : " links") + ", median p50 " + p[3] + " GB/s (min " + p[4] +
      ", max " + p[5] + "), " + p[6] + " slow, " + p[7] + " bimodal; slowest link " + p[8] + " at " + p[9] + " GB/s";
  }
  document.addEventListener("mouseover", function (e) {
    var c = e.target.closest ? e.target.closest("rect[data-src], rect[data-pair], [data-tip]") : null;
    if (!c) { tip.hidden = true; return; }
    tip.textContent = c.hasAttribute("data-tip") ? c.getAttribute("data-tip") :
      c.hasAttribute("data-pair") ? pairText(c) : tipText(c);
    var box = c.getBoundingClientRect();
    tip.style.left = (window.scrollX + box.right + 8) + "px";
    tip.style.top = (window.scrollY + box.top) + "px";
    tip.hidden = false;
  });

  each(document.querySelectorAll("section.heatmap"), function (section) {
    var svg = section.querySelector("svg"), zoom = section.querySelector("input.zoom");
    if (!svg || !zoom) return;
    var w = +svg.getAttribute("width"), h = +svg.getAttribute("height");
    zoom.addEventListener("input", function () {
      svg.setAttribute("width", Math.round(w * zoom.value));
      svg.setAttribute("height", Math.round(h * zoom.value));
    });
  });

  // A figure zooms into the box dragged across it (its viewBox narrowed; the text scales with it, as a
  // magnifier's would) and back out on a double click.
  each(document.querySelectorAll("figure.fig svg"), function (svg) {
    var full = svg.getAttribute("viewBox") ||
      "0 0 " + svg.getAttribute("width") + " " + svg.getAttribute("height");
    svg.setAttribute("viewBox", full);
    var start = null, band = null;
    function at(e) {
      var p = svg.createSVGPoint();
      p.x = e.clientX; p.y = e.clientY;
      return p.matrixTransform(svg.getScreenCTM().inverse());
    }
    function box(p) {
      return { x: Math.min(start.x, p.x), y: Math.min(start.y, p.y),
               w: Math.abs(p.x - start.x), h: Math.abs(p.y - start.y) };
    }
    svg.addEventListener("mousedown", function (e) {
      if (e.button !== 0) return;
      start = at(e);
      band = document.createElementNS(svg.namespaceURI, "rect");
      band.setAttribute("class", "zoom-band");
      svg.appendChild(band);
      e.preventDefault();
    });
    svg.addEventListener("mousemove", function (e) {
      if (!start) return;
      var b = box(at(e));
      band.setAttribute("x", b.x); band.setAttribute("y", b.y);
      band.setAttribute("width", b.w); band.setAttribute("height", b.h);
    });
    window.addEventListener("mouseup", function (e) {
      if (!start) return;
      var b = box(at(e));
      // A click is not a drag: a box of a few pixels would zoom into nothing.
      if (b.w > 4 && b.h > 4) svg.setAttribute("viewBox", [b.x, b.y, b.w, b.h].join(" "));
      svg.removeChild(band);
      start = band = null;
    });
    svg.addEventListener("dblclick", function () { svg.setAttribute("viewBox", full); });
  });
})();
