package protocol

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// errLineTooLong is returned by [LineReader.Next] for a line over the limit;
// callers recognise it as an [ErrViolation].
var errLineTooLong = fmt.Errorf("%w: line too long", ErrViolation)

// LineReader splits a stream into lines of at most a fixed length. Unlike
// bufio.Scanner it reports which limit a line broke, and a stream that ends
// inside a line as a truncated message, not as a last line.
type LineReader struct {
	r   *bufio.Reader
	max int
	buf []byte
	err error
}

// NewLineReader reads lines of at most max bytes, without their "\n", from r.
func NewLineReader(r io.Reader, max int) *LineReader {
	return &LineReader{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

// Next returns the next line without its "\n". The slice is valid until the
// next call. At the end of the stream it returns io.EOF, or, when the stream
// ended inside a line, an error wrapping io.ErrUnexpectedEOF; for a line
// over the limit, an error wrapping [ErrViolation], after which the stream
// cannot be read further. Once Next has returned an error it returns the
// same error forever.
func (l *LineReader) Next() ([]byte, error) {
	if l.err != nil {
		return nil, l.err
	}
	l.buf = l.buf[:0]
	for {
		chunk, err := l.r.ReadSlice('\n')
		l.buf = append(l.buf, chunk...)
		if len(l.buf) > l.max+1 || (len(l.buf) == l.max+1 && l.buf[l.max] != '\n') {
			l.err = fmt.Errorf("%w: over %d bytes, starting %s", errLineTooLong, l.max, excerpt(l.buf))
			return nil, l.err
		}
		switch {
		case err == nil:
			return bytes.TrimSuffix(l.buf, []byte{'\n'}), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(l.buf) == 0:
			l.err = io.EOF
		case errors.Is(err, io.EOF):
			l.err = fmt.Errorf("the stream ended inside a line (%w): %s", io.ErrUnexpectedEOF, excerpt(l.buf))
		default:
			l.err = err
		}
		return nil, l.err
	}
}
