// Tally console service worker: adds the signed-in person's ID token to each /console request (API
// Gateway's JWT authorizer reads only the Authorization header; a browser never sends one on its own).
// The sign-in page and static files go out untouched; a 401 on a page sends the person to sign in.
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
  return Promise.all([token(), bodyRead]).then(function (got) {
    var headers = new Headers(request.headers);
    if (got[0]) { headers.set("Authorization", "Bearer " + got[0]); }
    return fetch(url.href, {
      method: request.method, headers: headers, body: got[1], credentials: "same-origin", redirect: "manual"
    });
  }).then(function (response) {
    if (response.status === 401 && request.mode === "navigate") {
      return Response.redirect("/console/login?next=" + encodeURIComponent(url.pathname + url.search), 303);
    }
    return response;
  });
}
