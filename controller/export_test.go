package controller

// SetPushQueued makes target i's lock send on ch each time a push starts
// waiting for it (ch must have room: it is sent to under the lock's own).
func (c *Controller) SetPushQueued(i int, ch chan<- struct{}) {
	p := &c.tgts[i].mu
	p.mu.Lock()
	defer p.mu.Unlock()
	p.queued = ch
}
