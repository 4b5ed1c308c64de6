// Keyboard shortcuts for the review page: a key clicks the button that carries it in data-key.
// Typing in a field (the edit box, the reason list) is left alone; Escape leaves the field.
// The forms also work without htmx (a plain POST, then a redirect back), so a key pressed before htmx has bound them
// still records its verdict; once htmx has, <body data-ready> says so.
(function () {
  document.addEventListener("DOMContentLoaded", function () { document.body.dataset.ready = "1"; });
  // A new item takes the focus to its first action, never to a text box: htmx would give the focus back to an element
  // of the same id (the edit box after a question edit), and the next shortcut would be typed into the next question.
  document.addEventListener("htmx:afterSettle", function () {
    var item = document.getElementById("item");
    if (!item) { return; }
    var first = item.querySelector("form[action='/ui/verdict'] button[data-key]") || item.querySelector("button[data-key]");
    if (first) { first.focus(); } else if (document.activeElement) { document.activeElement.blur(); }
  });
  document.addEventListener("keydown", function (event) {
    var target = event.target;
    var typing = target && (target.tagName === "INPUT" || target.tagName === "TEXTAREA" || target.tagName === "SELECT");
    if (typing) {
      if (event.key === "Escape") { target.blur(); }
      return;
    }
    if (event.ctrlKey || event.metaKey || event.altKey) { return; }
    var button = document.querySelector('[data-key="' + event.key.toLowerCase() + '"]');
    if (!button || button.disabled) { return; }
    event.preventDefault();
    var form = button.closest("form");
    if (form && window.htmx && form.getAttribute("hx-post")) {
      // Send the form through htmx directly: a freshly swapped-in form may not be bound yet (htmx binds new
      // content when it settles), and a plain submit would leave the page.
      htmx.ajax("POST", form.getAttribute("hx-post"), {
        source: form, target: form.getAttribute("hx-target") || "#item", swap: form.getAttribute("hx-swap") || "outerHTML"
      });
    } else {
      button.click();
    }
  });
})();
