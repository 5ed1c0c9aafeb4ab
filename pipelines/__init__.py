"""Pipeline steps: small transforms from a stream, table or DataFrame to another, engines at the edge."""
