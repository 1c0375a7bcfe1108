"""Dependency bundles: a tool's packages, built when it is saved and fetched at call time.

identity   bundle_id(language, target, requirements), targets
store      BundleStore: records (DynamoDB) and files (S3), conditional status moves
build      build_bundle: pip / npm into a folder, bytecode, deterministic zip, size limit
contents   what a build made: zipped, or linked read-only into a bundle cache
scheduler  who builds: LocalBuildWorker (kiln dev), LambdaBuildScheduler + handle_build_event
cache      BundleCache: download once, unpack atomically under /tmp, LRU within a budget
service    Bundles: the catalog's save hook, the call path's `use`, REST/CLI views
api, cli   /api/bundles routes; `kiln bundles ls | show | build | retry`
"""

__all__ = ["build", "cache", "errors", "hooks", "identity", "scheduler", "settings", "store"]
