// Tally console service worker: adds the signed-in person's ID token to each /console request (API
// Gateway's JWT authorizer reads only the Authorization header; a browser never sends one on its own).
// The sign-in page and static files go out untouched; a 401 on a page sends the person to sign in again.
"use strict";
var CACHE = "tally-console", TOKEN = "/console/static/__token";

self.addEventListener("install", function () { self.skipWaiting(); });
self.addEventListener("activate", function (event) { event.waitUntil(self.clients.claim()); });

function token() {
  return caches.open(CACHE).then(function (cache) { return cache.match(TOKEN); })
    .then(function (found) { return found ? found.text() : ""; });
}

self.addEventListener("fetch", function (event) {
  var url = new URL(event.request.url);
  if (url.origin !== self.location.origin || !url.pathname.startsWith("/console")) { return; }
  if (url.pathname.startsWith("/console/static/") || url.pathname === "/console/login") { return; }
  event.respondWith(withToken(event.request, url));
});

function withToken(request, url) {
  var bodyRead = (request.method === "GET" || request.method === "HEAD")
    ? Promise.resolve(undefined) : request.clone().arrayBuffer();
  var body;
  return Promise.all([token(), bodyRead]).then(function (got) {
    body = got[1];
    var headers = new Headers(request.headers);
    if (got[0]) { headers.set("Authorization", "Bearer " + got[0]); }
    return fetch(url.href, {
      method: request.method, headers: headers, body: got[1], credentials: "same-origin", redirect: "manual"
    });
  }).then(function (response) {
    if (response.status === 401 && request.mode === "navigate") {
      return Response.redirect(signInAgain(request, url, body), 303);
    }
    return response;
  });
}

// The ID token lives 60 minutes. When it has expired (or is gone) the person gets the sign-in page saying so,
// and comes back where they were: the page itself for a GET; for a form (an action), the item it was about,
// with "not done" (the CSRF token belongs to the old sign-in, so the form cannot be replayed as it was).
function signInAgain(request, url, body) {
  var next = url.pathname + url.search, why = "expired";
  if (request.method !== "GET" && request.method !== "HEAD") {
    var form = new URLSearchParams(body ? new TextDecoder().decode(body) : "");
    next = form.get("id") ? "/console/item?id=" + encodeURIComponent(form.get("id")) : "/console/queue";
    why = "not-done";
  }
  return "/console/login?next=" + encodeURIComponent(next) + "&expired=" + why;
}
