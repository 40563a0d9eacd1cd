// TrainBench site: sortable tables and the leaderboard filters. The pages work without it (rows are
// pre-sorted by rank, every row shown); it reads only data-* attributes and never builds HTML from text.
"use strict";

function cellKey(cell, type) {
  const raw = cell.hasAttribute("data-sort") ? cell.getAttribute("data-sort") : cell.textContent.trim();
  if (type !== "num") return raw.toLowerCase();
  if (raw === "") return null; // unknown values sort last in both directions
  const v = parseFloat(raw); // parseFloat("Infinity") is Infinity: not-reached rows sort after every number
  return Number.isNaN(v) ? null : v;
}

function sortTable(table, col, dir) {
  const th = table.tHead.rows[0].cells[col];
  const type = th.getAttribute("data-type") || "text";
  const body = table.tBodies[0];
  const rows = Array.from(body.rows).map((row, i) => ({ row, i, k: cellKey(row.cells[col], type) }));
  const sign = dir === "ascending" ? 1 : -1;
  rows.sort((a, b) => {
    if (a.k === null || b.k === null) return a.k === b.k ? a.i - b.i : (a.k === null ? 1 : -1);
    if (a.k < b.k) return -sign;
    if (a.k > b.k) return sign;
    return a.i - b.i; // stable
  });
  for (const r of rows) body.appendChild(r.row);
  for (const h of table.tHead.rows[0].cells) h.removeAttribute("aria-sort");
  th.setAttribute("aria-sort", dir);
}

function makeSortable(table) {
  Array.from(table.tHead.rows[0].cells).forEach((th, col) => {
    if (!th.hasAttribute("data-type")) return;
    const button = document.createElement("button");
    button.type = "button";
    button.className = "sort";
    while (th.firstChild) button.appendChild(th.firstChild);
    th.appendChild(button);
    button.addEventListener("click", () => {
      const next = th.getAttribute("aria-sort") === "ascending" ? "descending" : "ascending";
      sortTable(table, col, next);
    });
  });
}

function applyFilters(form, updateUrl) {
  const selects = Array.from(form.querySelectorAll("select[data-attr]"));
  const want = selects.map((s) => [s.getAttribute("data-attr"), s.value]);
  // on a workload page a chosen round keeps the local runs beside that round's published systems
  const keepLocal = form.hasAttribute("data-keep-local");
  let shown = 0, total = 0;
  for (const section of document.querySelectorAll("section.workload, div.boards")) {
    let visible = 0;
    for (const row of section.querySelectorAll("table.lb tbody tr")) {
      const ok = want.every(([attr, value]) => {
        if (value === "") return true;
        const have = row.getAttribute("data-" + attr);
        if (attr === "round" && have === null) return keepLocal || value === "local";  // a local row has no round
        return have === value;
      });
      row.hidden = !ok;
      total += 1;
      if (ok) { visible += 1; shown += 1; }
    }
    section.querySelector(".nomatch").hidden = visible > 0;
  }
  const count = document.getElementById("f-count");
  if (count) count.textContent = shown + " of " + total + " rows";
  if (!updateUrl) return;
  // the filters live in the URL fragment, so a filtered view can be linked (also from file://)
  const params = new URLSearchParams();
  for (const [attr, value] of want) if (value) params.set(attr, value);
  const hash = params.toString();
  history.replaceState(null, "", hash ? "#" + hash : location.pathname + location.search);
}

function setupFilters() {
  const form = document.getElementById("filters");
  if (!form) return;
  const params = new URLSearchParams(location.hash.slice(1));
  for (const select of form.querySelectorAll("select[data-attr]")) {
    const value = params.get(select.getAttribute("data-attr"));
    if (value !== null && Array.from(select.options).some((o) => o.value === value)) select.value = value;
    select.addEventListener("change", () => applyFilters(form, true));
  }
  form.hidden = false;
  applyFilters(form, false);
}

document.addEventListener("DOMContentLoaded", () => {
  for (const table of document.querySelectorAll("table.sortable")) makeSortable(table);
  setupFilters();
});
