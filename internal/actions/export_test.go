package actions

// MarkRunning lets a test act as if the engine led, without its workers.
func MarkRunning(e *Engine, on bool) { e.running.Store(on) }

// Running reports whether the engine has started.
func Running(e *Engine) bool { return e.running.Load() }

var EventNote = eventNote
