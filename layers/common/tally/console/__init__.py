"""The operations console: server-rendered pages for support and finance (docs/console.md).

`app.handle(event)` is the whole console; functions/console/app.py only calls it. Identity comes from the
claims API Gateway's JWT authorizer put in the event (never from a header), pages read the same services
the CLI uses, and every action is a POST by an `operators` member with a CSRF token.
"""
