// Tally console: the only script. It keeps the ID token where the service worker (sw.js) finds it, so
// every /console request carries `Authorization: Bearer …` for API Gateway's JWT authorizer.
"use strict";
(function () {
  var CACHE = "tally-console", TOKEN = "/console/static/__token";
  if (!("serviceWorker" in navigator)) { return; }
  var ready = navigator.serviceWorker.register("/console/static/sw.js", { scope: "/console" })
    .then(function () { return navigator.serviceWorker.ready; });

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
  });
})();
