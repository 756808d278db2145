//go:build race

package controller_test

// raceDetector: the tests run under -race (CI's race step), where the
// pushes of thousands of services take minutes.
const raceDetector = true
