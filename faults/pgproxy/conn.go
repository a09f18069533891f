package pgproxy

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/harmless-dev/harmless/internal/pgaddr"
)

// bufSize is the size of each direction's read and write buffers, and the
// most of a Query or Parse message the proxy looks at.
const bufSize = 32 << 10

// maxStartupLen is PostgreSQL's MAX_STARTUP_PACKET_LENGTH.
const maxStartupLen = 10000

// cancelWait bounds how long a forwarded cancel request waits for the
// server to close its connection (which is how it acknowledges one).
const cancelWait = 10 * time.Second

// conn is one client connection and, once the client has sent its
// StartupMessage, its connection to the server.
type conn struct {
	p      *Proxy
	l      *Listener // the listener it came in on, which names its client
	client net.Conn
	// started is set, under p.mu, once the client has sent its
	// StartupMessage: from then on it is counted as one of its client's
	// connections.
	started bool

	mu     sync.Mutex // guards the fields up to the blank line
	server net.Conn
	isCut  bool
	meta   connInfo
	key    []byte // the backend's secret key, for cancel requests

	// serverToClient's state: the transaction status (ReadyForQuery's 'I',
	// 'T', 'E') and the statements completed in the open transaction.
	status byte
	stmts  int

	// clientToServer's state: the prepared statements and portals that
	// begin, commit or roll back a transaction block. Drivers that send
	// every statement over the extended protocol (pgjdbc) send BEGIN so,
	// pipelined with the first statement of the block.
	txStmts, txPortals map[string]txControl
	// clientToServer's too: the statements and portals whose text holds
	// a rule's Within, and which.
	stmtWithin, portalWithin map[string][]string

	// within is what the open transaction block has sent of the armed
	// rules' Within texts, and commitWithin what the transaction whose
	// COMMIT was sent last had: clientToServer writes them, serverToClient
	// reads them at the points it watches. implicitWithin is what the
	// statements sent outside a block have mentioned since the server was
	// last ready: each runs in a transaction of its own, which commits
	// before the server is ready again. inBlock is whether the client has
	// opened a transaction block (with a BEGIN, sent as a simple query or
	// over the extended protocol) and not ended it. Guarded by mu.
	within, commitWithin, implicitWithin []string
	inBlock                              bool
}

func (c *conn) info() connInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.meta
}

// owns reports whether a cancel request for (pid, key) is for this
// connection's backend.
func (c *conn) owns(pid uint32, key []byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.meta.PID != 0 && c.meta.PID == int(pid) && bytes.Equal(c.key, key)
}

// cut closes both sides. The relay goroutines then fail on their next read
// or write and end.
func (c *conn) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.isCut {
		return
	}
	c.isCut = true
	c.client.Close()
	if c.server != nil {
		c.server.Close()
	}
}

// setServer attaches the server side, or closes it if the connection was
// cut meanwhile.
func (c *conn) setServer(s net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.isCut {
		s.Close()
		return false
	}
	c.server = s
	return true
}

// serve runs the startup phase, then the relay.
func (c *conn) serve() {
	defer c.p.wg.Done()
	defer c.p.forget(c)
	defer c.cut()
	cr := bufio.NewReaderSize(c.client, bufSize)
	for {
		raw, msg, err := readStartup(cr)
		if err != nil {
			return
		}
		switch m := msg.(type) {
		case *pgproto3.SSLRequest, *pgproto3.GSSEncRequest:
			// No encryption: the client goes on in plaintext or gives up.
			if _, err := c.client.Write([]byte{'N'}); err != nil {
				return
			}
		case *pgproto3.CancelRequest:
			c.forwardCancel(raw, m)
			return
		case *pgproto3.StartupMessage:
			c.relay(cr, raw, m)
			return
		default:
			return
		}
	}
}

// readStartup reads one untyped startup-phase message and decodes it with
// pgproto3. It returns the message's bytes as sent, to be forwarded
// untouched.
func readStartup(r *bufio.Reader) ([]byte, pgproto3.FrontendMessage, error) {
	head, err := r.Peek(4)
	if err != nil {
		return nil, nil, err
	}
	n := int(binary.BigEndian.Uint32(head))
	if n < 8 || n > maxStartupLen {
		return nil, nil, fmt.Errorf("startup packet of %d bytes", n)
	}
	raw := make([]byte, n)
	if _, err := io.ReadFull(r, raw); err != nil {
		return nil, nil, err
	}
	msg, err := pgproto3.NewBackend(bytes.NewReader(raw), io.Discard).ReceiveStartupMessage()
	return raw, msg, err
}

func (c *conn) dial(addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: dialTimeout}
	s, err := d.DialContext(c.p.ctx, pgaddr.Network(addr), addr)
	if err != nil {
		return nil, err
	}
	if !c.setServer(s) {
		return nil, net.ErrClosed
	}
	return s, nil
}

// forwardCancel sends a cancel request to the server of the backend it
// names, then waits for that server to close the connection before closing
// the client's, as the server would.
func (c *conn) forwardCancel(raw []byte, m *pgproto3.CancelRequest) {
	s, err := c.dial(c.p.cancelTarget(c.l, m.ProcessID, m.SecretKey))
	if err != nil {
		return
	}
	if err := s.SetDeadline(time.Now().Add(cancelWait)); err != nil {
		return
	}
	if _, err := s.Write(raw); err != nil {
		return
	}
	_, _ = io.Copy(io.Discard, s)
}

// relay forwards the StartupMessage to the upstream server and then relays
// messages both ways until either side ends or the connection is cut.
func (c *conn) relay(cr *bufio.Reader, raw []byte, sm *pgproto3.StartupMessage) {
	upstream := c.l.Upstream()
	c.mu.Lock()
	c.meta.ApplicationName = sm.Parameters["application_name"]
	c.meta.User = sm.Parameters["user"]
	c.meta.Database = sm.Parameters["database"]
	if c.meta.Database == "" {
		c.meta.Database = c.meta.User
	}
	c.meta.Upstream = upstream
	c.mu.Unlock()
	c.p.opened(c, sm.Parameters["application_name"])

	s, err := c.dial(upstream)
	if err != nil {
		if c.p.ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
			c.refuse(fmt.Sprintf("pgproxy: cannot reach the upstream server %s: %v", upstream, err))
		}
		return
	}
	sw := bufio.NewWriterSize(s, bufSize)
	if _, err := sw.Write(raw); err != nil {
		return
	}
	if err := sw.Flush(); err != nil {
		return
	}
	c.p.wg.Add(1)
	go func() {
		defer c.p.wg.Done()
		defer c.cut()
		c.serverToClient(bufio.NewReaderSize(s, bufSize), bufio.NewWriterSize(c.client, bufSize))
	}()
	c.clientToServer(cr, sw)
}

// refuse tells the client, as a server would, why it gets no connection.
func (c *conn) refuse(msg string) {
	e := &pgproto3.ErrorResponse{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: "08006", Message: msg}
	if buf, err := e.Encode(nil); err == nil {
		_, _ = c.client.Write(buf)
	}
}

// clientToServer relays the client's messages, watching for COMMIT.
func (c *conn) clientToServer(r *bufio.Reader, w *bufio.Writer) {
	for {
		typ, n, err := readHeader(r)
		if err != nil {
			return
		}
		switch typ {
		case 'Q': // Query
			head, err := peekHead(r, n)
			if err != nil {
				return
			}
			text := cstring(head)
			if c.sent(text, c.mentions(text)) && c.atImplicit(BeforeCommit, w) {
				return
			}
			if len(head) == n && isCommit(text) && c.committing() && c.at(BeforeCommit, 0, w) {
				return
			}
		case 'P': // Parse: name, query, ...
			head, err := peekHead(r, n)
			if err != nil {
				return
			}
			name := cstring(head)
			query, whole := []byte(nil), false
			if len(name) < len(head) {
				rest := head[len(name)+1:]
				query = cstring(rest)
				whole = len(query) < len(rest)
			}
			c.txStmts = remember(c.txStmts, name, txControlOf(query, whole))
			c.stmtWithin = rememberWithin(c.stmtWithin, name, c.mentions(query))
		case 'B': // Bind: portal, statement, ...
			if len(c.txStmts) == 0 && len(c.txPortals) == 0 && len(c.stmtWithin) == 0 && len(c.portalWithin) == 0 {
				break
			}
			head, err := peekHead(r, n)
			if err != nil {
				return
			}
			portal := cstring(head)
			var stmt []byte
			if len(portal) < len(head) {
				stmt = cstring(head[len(portal)+1:])
			}
			c.txPortals = remember(c.txPortals, portal, c.txStmts[string(stmt)])
			c.portalWithin = rememberWithin(c.portalWithin, portal, c.stmtWithin[string(stmt)])
		case 'E': // Execute: portal, row limit
			if len(c.txPortals) == 0 && len(c.portalWithin) == 0 {
				break
			}
			head, err := peekHead(r, n)
			if err != nil {
				return
			}
			portal := cstring(head)
			ctl := c.txPortals[string(portal)]
			if c.sent([]byte(ctl), c.portalWithin[string(portal)]) && c.atImplicit(BeforeCommit, w) {
				return
			}
			if ctl == txCommit && c.committing() && c.at(BeforeCommit, 0, w) {
				return
			}
		case 'C': // Close: 'S' or 'P', name
			if len(c.txStmts) == 0 && len(c.txPortals) == 0 && len(c.stmtWithin) == 0 && len(c.portalWithin) == 0 {
				break
			}
			head, err := peekHead(r, n)
			if err != nil {
				return
			}
			if len(head) > 0 {
				switch name := string(cstring(head[1:])); head[0] {
				case 'S':
					delete(c.txStmts, name)
					delete(c.stmtWithin, name)
				case 'P':
					delete(c.txPortals, name)
					delete(c.portalWithin, name)
				}
			}
		}
		if err := relayMsg(w, r, typ, n); err != nil {
			return
		}
	}
}

// mentions returns the Within texts of the armed rules that text holds.
func (c *conn) mentions(text []byte) []string {
	rules := c.p.rules.Load()
	if rules == nil {
		return nil
	}
	var found []string
	for _, f := range *rules {
		if w := f.rule.Within; w != "" && !slices.Contains(found, w) && bytes.Contains(text, []byte(w)) {
			found = append(found, w)
		}
	}
	return found
}

// sent notes a statement the client sent (its text, when it came as a
// simple Query; over the extended protocol, its txControl) that mentions the Within texts within: a BEGIN starts a
// transaction block, which has mentioned nothing yet, and a ROLLBACK ends
// one. It reports whether the statement mentions one of them outside a
// block: it then commits on its own (autocommit), and is where the points
// of its implicit COMMIT are.
func (c *conn) sent(text []byte, within []string) (implicit bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case isBegin(text):
		c.within, c.inBlock = nil, true
	case isRollback(text), isCommit(text):
		c.inBlock = false
	}
	if isRollback(text) {
		c.within = nil
	}
	list := &c.within
	if !c.inBlock {
		list = &c.implicitWithin
	}
	for _, w := range within {
		if !slices.Contains(*list, w) {
			*list = append(*list, w)
		}
	}
	return !c.inBlock && len(within) > 0
}

// readyAgain notes that the server is ready for a query outside a
// transaction block: the statements sent outside one have committed, or
// failed, and it returns what they mentioned when they committed.
func (c *conn) readyAgain(failed bool) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	mentioned := c.implicitWithin
	c.implicitWithin = nil
	if failed {
		return nil
	}
	return mentioned
}

// atImplicit fires, at point pt of an implicit transaction (a statement
// that ran outside a transaction block), the rules confined to the
// transactions that mention a text, when this one did: an implementation
// that claims and applies the effect in one autocommitted statement has
// its ambiguous commit there. It reports whether the connection was cut.
// For BeforeCommit it checks what the statement being sent mentions; for
// AfterCommitComplete, what mentioned holds.
func (c *conn) atImplicit(pt Point, w *bufio.Writer, mentioned ...string) bool {
	if pt == BeforeCommit {
		c.mu.Lock()
		mentioned = slices.Clone(c.implicitWithin)
		c.mu.Unlock()
	}
	rules := c.p.rules.Load()
	if rules == nil || len(mentioned) == 0 {
		return false
	}
	for _, f := range *rules {
		r := f.rule
		if r.At != pt || r.Within == "" || !slices.Contains(mentioned, r.Within) || !r.Scope.matches(c.l.client) || !f.reserve() {
			continue
		}
		f.record(c.info().PID)
		_ = w.Flush()
		c.cut()
		return true
	}
	return false
}

// committing notes that the client sends COMMIT: what its transaction
// mentioned is kept for the points at and after the COMMIT, and the next
// transaction starts afresh. It reports true, for use in a condition.
func (c *conn) committing() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.commitWithin, c.within, c.inBlock = c.within, nil, false
	return true
}

// mentioned reports whether the transaction a point pt is in has sent a
// statement that holds within: the open one for AfterStatement, the one
// whose COMMIT was sent for the points at COMMIT.
func (c *conn) mentioned(pt Point, within string) bool {
	if within == "" {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if pt == AfterStatement {
		return slices.Contains(c.within, within)
	}
	return slices.Contains(c.commitWithin, within)
}

// rememberWithin records in set the Within texts name's statement holds.
func rememberWithin(set map[string][]string, name []byte, within []string) map[string][]string {
	if len(within) == 0 {
		if len(set) > 0 {
			delete(set, string(name))
		}
		return set
	}
	if set == nil {
		set = map[string][]string{}
	}
	set[string(name)] = within
	return set
}

// isRollback reports whether a simple query's text is a ROLLBACK or ABORT
// of the transaction block (not ROLLBACK TO SAVEPOINT, nor PREPARED).
func isRollback(text []byte) bool {
	words := bytes.Fields(bytes.TrimRight(bytes.TrimSpace(text), "; \t\r\n"))
	if len(words) == 0 || !(bytes.EqualFold(words[0], []byte("rollback")) || bytes.EqualFold(words[0], []byte("abort"))) {
		return false
	}
	return len(words) == 1 || bytes.EqualFold(words[1], []byte("work")) || bytes.EqualFold(words[1], []byte("transaction"))
}

// isBegin reports whether a simple query's text starts a transaction
// block: BEGIN or START TRANSACTION, in any case.
func isBegin(text []byte) bool {
	words := bytes.Fields(bytes.TrimLeft(text, " \t\r\n;"))
	switch {
	case len(words) == 0:
		return false
	case bytes.EqualFold(bytes.TrimRight(words[0], ";"), []byte("begin")):
		return true
	}
	return len(words) > 1 && bytes.EqualFold(words[0], []byte("start")) && bytes.EqualFold(bytes.TrimRight(words[1], ";"), []byte("transaction"))
}

// txControl is a statement that begins, commits or rolls back a
// transaction block, as the canonical text sent understands; "" is any
// other statement.
type txControl string

const (
	txBegin    txControl = "BEGIN"
	txCommit   txControl = "COMMIT"
	txRollback txControl = "ROLLBACK"
)

// txControlOf is what a prepared statement's text does to the transaction
// block; whole is whether text is the statement's whole text (a COMMIT or
// ROLLBACK must be, a BEGIN is known by its first words).
func txControlOf(text []byte, whole bool) txControl {
	switch {
	case isBegin(text):
		return txBegin
	case whole && isCommit(text):
		return txCommit
	case whole && isRollback(text):
		return txRollback
	}
	return ""
}

// remember records in set what name's statement or portal does to the
// transaction block, forgetting a name that does nothing to it.
func remember(set map[string]txControl, name []byte, ctl txControl) map[string]txControl {
	if ctl != "" {
		if set == nil {
			set = make(map[string]txControl)
		}
		set[string(name)] = ctl
	} else if len(set) > 0 {
		delete(set, string(name))
	}
	return set
}

// serverToClient relays the server's messages, tracking the transaction
// status and watching the CommandCompletes.
func (c *conn) serverToClient(r *bufio.Reader, w *bufio.Writer) {
	implicitFailed := false // an error since the server was last ready, outside a block
	for {
		typ, n, err := readHeader(r)
		if err != nil {
			return
		}
		switch typ {
		case 'C': // CommandComplete
			head, err := peekHead(r, n)
			if err != nil {
				return
			}
			if c.completed(cstring(head), w) {
				return
			}
		case 'Z': // ReadyForQuery
			head, err := peekHead(r, n)
			if err != nil {
				return
			}
			if len(head) > 0 {
				c.status = head[0]
				if c.status == 'I' {
					c.stmts = 0
					// Before the client hears it: the statements it sent
					// outside a block have committed.
					if mentioned := c.readyAgain(implicitFailed); len(mentioned) > 0 && c.atImplicit(AfterCommitComplete, w, mentioned...) {
						return
					}
				}
				implicitFailed = false
			}
		case 'E': // ErrorResponse: an open transaction has failed
			if c.status == 'T' {
				c.status = 'E'
			} else {
				implicitFailed = true // an implicit one rolled back
			}
		case 'S': // ParameterStatus: name, value
			head, err := peekHead(r, n)
			if err != nil {
				return
			}
			if name := cstring(head); string(name) == "application_name" && len(name) < len(head) {
				c.p.sawApplicationName(c.l, string(cstring(head[len(name)+1:])))
			}
		case 'K': // BackendKeyData
			head, err := peekHead(r, n)
			if err != nil {
				return
			}
			var kd pgproto3.BackendKeyData
			if len(head) == n && kd.Decode(head) == nil {
				c.mu.Lock()
				c.meta.PID, c.key = int(kd.ProcessID), kd.SecretKey
				c.mu.Unlock()
			}
		}
		if err := relayMsg(w, r, typ, n); err != nil {
			return
		}
	}
}

// completed tracks a CommandComplete with tag and fires the rules at
// AfterCommitComplete or AfterStatement. It reports whether the connection
// was cut.
func (c *conn) completed(tag []byte, w *bufio.Writer) bool {
	switch string(tag) {
	case "BEGIN", "START TRANSACTION":
		c.status, c.stmts = 'T', 0
		return false
	case "COMMIT":
		committed := c.status == 'T'
		c.status = 'I'
		return committed && c.at(AfterCommitComplete, 0, w)
	case "ROLLBACK", "PREPARE TRANSACTION":
		// ReadyForQuery corrects this after ROLLBACK TO SAVEPOINT.
		c.status = 'I'
		return false
	}
	if c.status != 'T' {
		c.observe(false)
		return false
	}
	c.observe(true)
	c.stmts++
	return c.at(AfterStatement, c.stmts, w)
}

// observe counts a completed statement, inside a transaction block or
// outside one, for the connection's client and for every armed rule whose
// scope holds this connection.
func (c *conn) observe(inTx bool) {
	if inTx {
		c.l.stats.inTx.Add(1)
	} else {
		c.l.stats.autocommit.Add(1)
	}
	rules := c.p.rules.Load()
	if rules == nil || len(*rules) == 0 {
		return
	}
	for _, f := range *rules {
		if !f.rule.Scope.matches(c.l.client) {
			continue
		}
		if inTx {
			f.inTx.Add(1)
		} else {
			f.autocommit.Add(1)
		}
	}
}

// at fires the armed rules that match point pt (and statement n) on this
// connection. Each firing is recorded before it acts; before acting, what
// was relayed so far is flushed to w's side. It reports whether the
// connection was cut.
func (c *conn) at(pt Point, n int, w *bufio.Writer) bool {
	rules := c.p.rules.Load()
	if rules == nil {
		return false
	}
	for _, f := range *rules {
		r := f.rule
		if r.At != pt || r.N != n {
			continue
		}
		if !r.Scope.matches(c.l.client) || !c.mentioned(pt, r.Within) || !f.reserve() {
			continue
		}
		f.record(c.info().PID)
		// A failed flush means the connection is going; the next write says so.
		_ = w.Flush()
		c.cut() // the only action
		return true
	}
	return false
}

// readHeader reads a typed message's type and body length.
func readHeader(r *bufio.Reader) (typ byte, n int, err error) {
	h, err := r.Peek(5)
	if err != nil {
		return 0, 0, err
	}
	typ, l := h[0], int(int32(binary.BigEndian.Uint32(h[1:])))
	if _, err := r.Discard(5); err != nil {
		return 0, 0, err
	}
	if l < 4 {
		return 0, 0, fmt.Errorf("message %q with length %d", typ, l)
	}
	return typ, l - 4, nil
}

// peekHead returns the first bytes of a body of n bytes, as many as the
// buffer holds, without consuming them. They are valid until r is read.
func peekHead(r *bufio.Reader, n int) ([]byte, error) {
	return r.Peek(min(n, r.Size()))
}

// relayMsg relays a message whose header has been read, and flushes w
// when r has nothing more buffered: messages sent together go on together,
// and nothing waits in w while the proxy waits for r.
func relayMsg(w *bufio.Writer, r *bufio.Reader, typ byte, n int) error {
	if err := copyMsg(w, r, typ, n); err != nil {
		return err
	}
	if r.Buffered() == 0 {
		return w.Flush()
	}
	return nil
}

// copyMsg writes a message's header and copies its body of n bytes from r
// to w, as it arrives.
func copyMsg(w *bufio.Writer, r *bufio.Reader, typ byte, n int) error {
	h := binary.BigEndian.AppendUint32(append(w.AvailableBuffer(), typ), uint32(n+4))
	if _, err := w.Write(h); err != nil {
		return err
	}
	for n > 0 {
		if r.Buffered() == 0 {
			if _, err := r.Peek(1); err != nil {
				return err
			}
		}
		b, err := r.Peek(min(n, r.Buffered()))
		if err != nil {
			return err
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
		if _, err := r.Discard(len(b)); err != nil {
			return err
		}
		n -= len(b)
	}
	return nil
}

// cstring is b up to its first NUL (all of b if there is none).
func cstring(b []byte) []byte {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return b[:i]
	}
	return b
}

// isCommit reports whether a statement's whole text is a COMMIT: COMMIT or
// END, optionally WORK or TRANSACTION, optionally AND [NO] CHAIN, in any
// case, with surrounding blanks and semicolons. COMMIT PREPARED is not: it
// commits a transaction prepared earlier, not the connection's.
func isCommit(text []byte) bool {
	text = bytes.TrimRight(bytes.TrimSpace(text), "; \t\r\n")
	if len(text) < 3 || len(text) > 64 {
		return false
	}
	words := bytes.Fields(text)
	is := func(i int, w string) bool { return i < len(words) && bytes.EqualFold(words[i], []byte(w)) }
	if !is(0, "commit") && !is(0, "end") {
		return false
	}
	i := 1
	if is(i, "work") || is(i, "transaction") {
		i++
	}
	if is(i, "and") {
		i++
		if is(i, "no") {
			i++
		}
		if !is(i, "chain") {
			return false
		}
		i++
	}
	return i == len(words)
}
