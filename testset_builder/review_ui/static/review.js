// Keyboard shortcuts for the review page: a key clicks the button that carries it in data-key.
// Typing in a field (the edit box, the reason list) is left alone; Escape leaves the field.
(function () {
  document.addEventListener("keydown", function (event) {
    var target = event.target;
    var typing = target && (target.tagName === "INPUT" || target.tagName === "TEXTAREA" || target.tagName === "SELECT");
    if (typing) {
      if (event.key === "Escape") { target.blur(); }
      return;
    }
    if (event.ctrlKey || event.metaKey || event.altKey) { return; }
    var button = document.querySelector('[data-key="' + event.key.toLowerCase() + '"]');
    if (button && !button.disabled) {
      event.preventDefault();
      button.click();
    }
  });
})();
