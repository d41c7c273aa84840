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
