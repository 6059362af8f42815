"""DynamoDB and SQS access: the only package that knows table layouts."""
