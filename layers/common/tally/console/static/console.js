// Tally console: the only script. It keeps the ID token where the service worker (sw.js) finds it, so
// every /console request carries `Authorization: Bearer …` for API Gateway's JWT authorizer.
"use strict";
(function () {
  var CACHE = "tally-console", TOKEN = "/console/static/__token";
  if (!("serviceWorker" in navigator)) { return; }
  var ready = navigator.serviceWorker.register("/console/static/sw.js", { scope: "/console" })
    .then(function () { return navigator.serviceWorker.ready; });

  // An item's form offers only the codes the chosen action accepts (the server refuses any other anyway).
  function offerCodesOfAction(form) {
    if (!form || !form.elements.code) { return; }
    var action = form.elements.action, code = form.elements.code;
    function show() {
      Array.prototype.forEach.call(code.querySelectorAll("optgroup"), function (group) {
        var fits = (group.getAttribute("data-action") || group.getAttribute("label")) === action.value;
        group.hidden = !fits;
        group.disabled = !fits;
      });
      var chosen = code.options[code.selectedIndex];
      if (chosen && chosen.parentNode.disabled) { code.value = ""; }
    }
    action.addEventListener("change", show);
    show();
  }

  function storeToken(token) {
    return caches.open(CACHE).then(function (cache) {
      return cache.put(TOKEN, new Response(token, { headers: { "content-type": "text/plain" } }));
    });
  }
  function forgetToken() { return caches.open(CACHE).then(function (cache) { return cache.delete(TOKEN); }); }

  document.addEventListener("DOMContentLoaded", function () {
    var session = document.getElementById("session");
    if (session) {
      Promise.all([ready, storeToken(session.getAttribute("data-token"))]).then(function () {
        session.removeAttribute("data-token");
        window.location.replace(session.getAttribute("data-next") || "/console");
      });
    }
    if (document.getElementById("bye")) { forgetToken(); }
    offerCodesOfAction(document.getElementById("act"));
  });
})();
