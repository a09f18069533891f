// Package certificate is the harmless certificate: the verdict of the
// conformance suite on one implementation, rule by rule, and the writers
// of its reports (JSON, JUnit XML, Markdown).
//
// It is the part of the harness a program needs to read, write or act on a
// certificate without running the suite: a CI step that merges the
// certificates of several runs, a dashboard, a tool that turns a
// certificate into a report. It therefore links no test framework, no
// database pool and no container machinery, only the standard library and
// the harness's catalogue types (packages fixtures and adapters); a test
// (internal/depgraph) holds it to that. Package suite makes certificates,
// folding what its Ginkgo specs recorded into a [Certificate], and hands
// them out (suite.Certify, suite.WithCertificate).
//
// docs/reports.md describes every field of the certificate and every
// report, as harmless certify writes them.
package certificate
