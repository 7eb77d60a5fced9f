// zero-memory dashboard: progressive enhancement only. Every page works
// without this file; it adds "select all" to lists and copy buttons.
(function () {
  "use strict";
  function each(selector, fn) {
    Array.prototype.forEach.call(document.querySelectorAll(selector), fn);
  }
  // "Select all" for bulk lists.
  each("input[data-select-all]", function (box) {
    box.addEventListener("change", function () {
      each("input[name=ids]", function (item) { item.checked = box.checked; });
    });
  });
  // On a narrow screen a table's rows become cards (app.css) and its head
  // is hidden: each cell is labelled with its column's heading (not one
  // that only a screen reader reads, like "Actions").
  each("table", function (table) {
    var heads = Array.prototype.map.call(table.querySelectorAll("thead th"), function (th) {
      var hidden = th.querySelector(".sr-only");
      var text = th.textContent.trim();
      return hidden && hidden.textContent.trim() === text ? "" : text;
    });
    Array.prototype.forEach.call(table.querySelectorAll("tbody tr"), function (row) {
      Array.prototype.forEach.call(row.children, function (cell, i) {
        if (cell.tagName === "TD" && heads[i]) { cell.setAttribute("data-label", heads[i]); }
      });
    });
  });
  // Copy buttons: <button data-copy="#id">.
  each("button[data-copy]", function (button) {
    button.hidden = false;
    button.addEventListener("click", function () {
      var target = document.querySelector(button.getAttribute("data-copy"));
      if (!target || !navigator.clipboard) { return; }
      navigator.clipboard.writeText(target.textContent).then(function () {
        button.textContent = "Copied";
      }, function () {
        button.textContent = "Select and copy";
      });
    });
  });
})();
