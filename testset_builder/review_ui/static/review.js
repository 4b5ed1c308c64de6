// Keyboard shortcuts for the review page: a key clicks the button that carries it in data-key.
// Typing in a field (the edit box, the reason list, the comment) is left alone; Escape leaves the field; a key in
// data-focus-key (m) takes the focus to its field.
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
  // The lease: a warning in the last minute before the item may go to another reviewer, and when it has ended.
  // The server says how many seconds were left when it sent the item, so the client's clock does not matter.
  var leaseTimer = null;
  function watchLease() {
    if (leaseTimer) { clearInterval(leaseTimer); leaseTimer = null; }
    var lease = document.getElementById("lease");
    if (!lease) { return; }
    if (!lease.dataset.deadline) {  // once per item: a later swap inside it (context, a tag) keeps the clock
      lease.dataset.deadline = String(Date.now() + 1000 * Number(lease.dataset.secondsLeft || 0));
    }
    var deadline = Number(lease.dataset.deadline);
    function tick() {
      var left = Math.round((deadline - Date.now()) / 1000);
      if (left <= 0) {
        lease.className = "lease warn over";
        lease.textContent = "Your hold on this item has ended: it may go to another reviewer, and your verdict is refused if others have given it all it wants.";
        clearInterval(leaseTimer); leaseTimer = null;
      } else if (left <= 60) {
        lease.className = "lease warn";
        lease.textContent = "Your hold on this item ends in " + left + " s: answer now, or it may go to another reviewer.";
      }
    }
    tick();
    leaseTimer = setInterval(tick, 1000);
  }
  document.addEventListener("DOMContentLoaded", watchLease);
  document.addEventListener("htmx:afterSettle", watchLease);
  document.addEventListener("keydown", function (event) {
    var target = event.target;
    var typing = target && (target.tagName === "INPUT" || target.tagName === "TEXTAREA" || target.tagName === "SELECT");
    if (typing) {
      if (event.key === "Escape") { target.blur(); }
      return;
    }
    if (event.ctrlKey || event.metaKey || event.altKey) { return; }
    var field = document.querySelector('[data-focus-key="' + event.key.toLowerCase() + '"]');
    if (field) {  // a key that goes to a text box (m: the comment): the key itself is not typed into it
      event.preventDefault();
      field.focus();
      return;
    }
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
