package lease

// DecodeStateForTest and EncodeStateForTest expose the persisted state's
// codec to the fuzzer.
func DecodeStateForTest(b []byte) ([]byte, error) {
	js, err := decodeState(b)
	if err != nil {
		return nil, err
	}
	return encodeState(js), nil
}

// InMemoryForTest reports whether m keeps job's state in memory.
func (m *Embedded) InMemoryForTest(job string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.jobs[job]
	return ok
}
