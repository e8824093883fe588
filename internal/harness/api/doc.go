// Package api holds the test that keeps inorder's public Go API a promise: every exported identifier of a
// public package, with its signature, is recorded in docs/api.txt, and the test fails when the code and
// the record differ. A change is made on purpose by updating the record (go test ./internal/harness/api
// -update), which refuses when an identifier goes or changes without CHANGELOG.md's Unreleased section
// naming it. See docs/promises.md for what is promised.
package api
