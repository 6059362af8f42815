"""Tally's embedded stack: everything the product needs from AWS and the channels, on 127.0.0.1.

Never deployed. `tally_local.stack.EmbeddedStack` (or `python -m tally_local.stack`) starts moto's
server with the resources of template.yaml, the channel simulator, an HTTP front door standing in
for API Gateway and an SQS pump standing in for the event source mapping; the real handlers from
functions/*/app.py run unchanged. See docs/embedded-stack.md.
"""
