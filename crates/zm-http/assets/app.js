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
