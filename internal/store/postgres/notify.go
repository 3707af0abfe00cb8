package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Notification is one message received on a LISTEN channel.
type Notification struct {
	Payload string
	// Resync reports that the listener lost its connection and listens
	// again: notifications sent in between are lost, so a cache kept
	// up to date by them must be dropped or reloaded. Payload is empty.
	Resync bool
}

// Notify sends payload on channel (pg_notify: delivered to the listeners
// when the sending transaction commits, here at once).
func (d *DB) Notify(ctx context.Context, channel, payload string) error {
	if channel == "" {
		return errors.New("notify: empty channel")
	}
	if _, err := d.exec(ctx, "SELECT pg_notify($1, $2)", channel, payload); err != nil {
		return fmt.Errorf("notify %s: %w", channel, err)
	}
	return nil
}

// Listen subscribes to channel on a connection of its own (outside the
// pool) and returns once the subscription is active, so a Notify after it
// returns is seen. Notifications arrive on the returned channel in order;
// when the connection breaks (the server restarted), the listener
// reconnects with backoff, listens again and sends a Resync notification.
// The channel is closed when ctx ends or the DB is closed.
//
// A slow reader holds up only its own listener: notifications queue in its
// connection meanwhile.
func (d *DB) Listen(ctx context.Context, channel string) (<-chan Notification, error) {
	if channel == "" {
		return nil, errors.New("listen: empty channel")
	}
	conn, err := d.listenConn(ctx, channel)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		closeConn(conn)
		return nil, fmt.Errorf("listen %s: store closed", channel)
	}
	d.listeners.Add(1)
	d.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	go func() { // Close ends the listener too
		select {
		case <-d.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	out := make(chan Notification, 16)
	go func() {
		defer d.listeners.Done()
		defer cancel()
		d.listen(ctx, channel, conn, out)
	}()
	return out, nil
}

// listenConn connects and runs LISTEN.
func (d *DB) listenConn(ctx context.Context, channel string) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, d.pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, fmt.Errorf("listen %s: connecting to %s: %w", channel, d.where, err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		closeConn(conn)
		return nil, fmt.Errorf("listen %s: %w", channel, err)
	}
	return conn, nil
}

// Reconnect backoff of a listener.
const (
	listenBackoffMin = 100 * time.Millisecond
	listenBackoffMax = 5 * time.Second
)

// listen forwards notifications from conn to out until ctx ends,
// reconnecting when conn breaks. It closes out.
func (d *DB) listen(ctx context.Context, channel string, conn *pgx.Conn, out chan<- Notification) {
	defer close(out)
	for {
		err := forward(ctx, conn, out)
		closeConn(conn)
		if ctx.Err() != nil {
			return
		}
		d.log.Warn("listener lost its connection; reconnecting", "channel", channel, "err", err)
		backoff := listenBackoffMin
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			if conn, err = d.listenConn(ctx, channel); err == nil {
				break
			}
			d.log.Debug("listener reconnect failed", "channel", channel, "err", err)
			backoff = min(2*backoff, listenBackoffMax)
		}
		d.log.Info("listener reconnected", "channel", channel)
		select {
		case out <- Notification{Resync: true}:
		case <-ctx.Done():
			closeConn(conn)
			return
		}
	}
}

// forward copies notifications until the connection fails or ctx ends.
func forward(ctx context.Context, conn *pgx.Conn, out chan<- Notification) error {
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		select {
		case out <- Notification{Payload: n.Payload}:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}
